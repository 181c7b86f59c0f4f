//===- Streams.cpp - n-stream loads, loops and sums -----------------------===//

#include "builder/Streams.h"

#include <algorithm>
#include <numeric>

using namespace mlir;
using namespace mlir::mhc;

SmallVector<SmallVector<Value>>
mlir::mhc::loadStreams(KernelBuilder &kb, const KernelContext &ctx, Value x,
                       Value m, Value c0, int64_t w) {
  int64_t n = ctx.n(), C = ctx.C();
  SmallVector<SmallVector<Value>> out(n);
  if (ctx.spec.layout == ::mhc::Layout::NC) {
    // x[m, i, c] at (m*n + i)*C + c: one w-wide access per stream.
    for (int64_t i = 0; i < n; ++i) {
      Value off = kb.add(kb.mul(kb.add(kb.mul(m, kb.idx(n)), kb.idx(i)),
                                kb.idx(C)),
                         c0);
      out[i] = kb.loadF32(x, off, w);
    }
    return out;
  }
  // x[m, c, i] at (m*C + c)*n + i: the n*w values of the chunk are
  // contiguous; read them in the widest aligned accesses and de-interleave.
  int64_t piece = std::gcd(n * w, 16 / ::mhc::byteWidth(ctx.spec.act));
  Value base = kb.mul(kb.add(kb.mul(m, kb.idx(C)), c0), kb.idx(n));
  for (auto &row : out)
    row.resize(w);
  for (int64_t p = 0; p < n * w; p += piece) {
    SmallVector<Value> part = kb.loadF32(x, kb.add(base, kb.idx(p)), piece);
    for (int64_t e = 0; e < piece; ++e) {
      int64_t flat = p + e;
      out[flat % n][flat / n] = part[e];
    }
  }
  return out;
}

void mlir::mhc::storeStreams(KernelBuilder &kb, const KernelContext &ctx,
                             Value outBuf, Value m, Value c0,
                             ArrayRef<SmallVector<Value>> values) {
  int64_t n = ctx.n(), C = ctx.C();
  int64_t w = values.front().size();
  if (ctx.spec.layout == ::mhc::Layout::NC) {
    for (int64_t i = 0; i < n; ++i) {
      Value off = kb.add(kb.mul(kb.add(kb.mul(m, kb.idx(n)), kb.idx(i)),
                                kb.idx(C)),
                         c0);
      kb.storeFrom(values[i], outBuf, off);
    }
    return;
  }
  int64_t piece = std::gcd(n * w, 16 / ::mhc::byteWidth(ctx.spec.act));
  Value base = kb.mul(kb.add(kb.mul(m, kb.idx(C)), c0), kb.idx(n));
  for (int64_t p = 0; p < n * w; p += piece) {
    SmallVector<Value> part;
    for (int64_t e = 0; e < piece; ++e) {
      int64_t flat = p + e;
      part.push_back(values[flat % n][flat / n]);
    }
    kb.storeFrom(part, outBuf, kb.add(base, kb.idx(p)));
  }
}

Value mlir::mhc::combineStream(KernelBuilder &kb, int64_t n, int64_t j,
                               ArrayRef<Value> post, ArrayRef<Value> P,
                               Value fb, function_ref<Value(int64_t)> x) {
  Value acc = kb.mul(post[j], fb);
  for (int64_t i = 0; i < n; ++i)
    acc = kb.fma(P[i * n + j], x(i), acc);
  return acc;
}

void mlir::mhc::expandCombineGradElement(
    KernelBuilder &kb, int64_t n, function_ref<Value(int64_t)> post,
    function_ref<Value(int64_t)> P, function_ref<Value(int64_t)> g, function_ref<Value(int64_t)> x, Value f,
    SmallVector<Value> &gf, SmallVector<SmallVector<Value>> &gx,
    MutableArrayRef<Value> sums) {
  Value sum = kb.mul(post(0), g(0));
  for (int64_t j = 1; j < n; ++j)
    sum = kb.fma(post(j), g(j), sum);
  gf.push_back(sum);
  for (int64_t i = 0; i < n; ++i) {
    Value gxi = kb.mul(P(i * n), g(0));
    for (int64_t j = 1; j < n; ++j)
      gxi = kb.fma(P(i * n + j), g(j), gxi);
    gx[i].push_back(gxi);
  }
  for (int64_t j = 0; j < n; ++j)
    sums[j] = kb.fma(f, g(j), sums[j]);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j)
      sums[n + i * n + j] = kb.fma(x(i), g(j), sums[n + i * n + j]);
}

void mlir::mhc::declareAcc(KernelContext &ctx) {
  if (ctx.spec.readsAcc())
    ctx.buffer("acc", ctx.spec.accType(), ::mhc::BufferRole::Input, {ctx.K(), 0});
}

Value mlir::mhc::plusAcc(KernelBuilder &kb, const ::mhc::KernelSpec &spec, Value own,
                         Value acc) {
  if (!spec.accF32 && ::mhc::byteWidth(spec.act) == 2)
    own = kb.toF32(kb.toType(own, elementType(kb.b.getContext(), spec.act)));
  return kb.add(own, acc);
}

SmallVector<Value> mlir::mhc::loadRow(KernelBuilder &kb, Value mem, Value row,
                                     int64_t count) {
  int64_t width = count % 4 == 0 ? 4 : (count % 2 == 0 ? 2 : 1);
  Value base = kb.mul(row, kb.idx(count));
  SmallVector<Value> out;
  for (int64_t k = 0; k < count; k += width)
    for (Value v : kb.loadF32(mem, kb.add(base, kb.idx(k)), width))
      out.push_back(v);
  return out;
}

::mhc::GridRule StreamShape::grid() const {
  return {0, 0, false, chunks, static_cast<int64_t>(threads) * perThread};
}

StreamShape mlir::mhc::streamShape(const KernelContext &ctx, int64_t w,
                                   int64_t itemValues, int64_t tokenValues) {
  int64_t bytes = ctx.n() * w * ::mhc::byteWidth(ctx.spec.act);
  auto perThread = [&](int64_t values) {
    int64_t most = std::min<int64_t>({4, 256 / bytes, 128 / values});
    int p = 1;
    while (p * 2 <= most)
      p *= 2;
    return p;
  };
  StreamShape s;
  s.chunks = ctx.C() / w;
  s.perThread = perThread(itemValues);
  s.tokenPerBlock = s.chunks % (s.threads * s.perThread) == 0;
  if (!s.tokenPerBlock)
    s.perThread = perThread(itemValues + tokenValues);
  int64_t live = s.perThread * itemValues +
                 (s.tokenPerBlock ? 1 : s.perThread) * tokenValues;
  s.minBlocks = live <= 96 ? 2 : 0;
  return s;
}

void mlir::mhc::forEachItem(
    KernelBuilder &kb, LaunchBuilder &l, const StreamShape &shape,
    function_ref<SmallVector<Value>(Value, Value)> load,
    function_ref<SmallVector<Value>(Value)> token,
    function_ref<void(Value, Value, ArrayRef<Value>, ArrayRef<Value>)> finish) {
  int64_t perBlock = static_cast<int64_t>(shape.threads) * shape.perThread;
  Value total = kb.mul(l.tokens(), kb.idx(shape.chunks));
  Value blockFirst = kb.mul(kb.blockId(), kb.idx(perBlock));
  Value first = kb.add(blockFirst, kb.threadId());
  auto items = [&](bool guarded) {
    SmallVector<Value> flat, m, chunk;
    SmallVector<SmallVector<Value>> loaded, perToken;
    for (int u = 0; u < shape.perThread; ++u) {
      Value f = kb.add(first, kb.idx(static_cast<int64_t>(u) * shape.threads));
      Value at = guarded ? kb.min(f, kb.sub(total, kb.idx(1))) : f;
      flat.push_back(f);
      m.push_back(kb.div(at, kb.idx(shape.chunks)));
      chunk.push_back(kb.rem(at, kb.idx(shape.chunks)));
      loaded.push_back(load(m.back(), chunk.back()));
      if (!shape.tokenPerBlock || u == 0)
        perToken.push_back(token(m.back()));
    }
    for (int u = 0; u < shape.perThread; ++u) {
      ArrayRef<Value> tv = perToken[shape.tokenPerBlock ? 0 : u];
      if (guarded)
        kb.when(kb.lt(flat[u], total),
                [&] { finish(m[u], chunk[u], loaded[u], tv); });
      else
        finish(m[u], chunk[u], loaded[u], tv);
    }
  };
  // Full: the block's last item, blockFirst + perBlock - 1, is below total.
  Value last = kb.add(blockFirst, kb.idx(perBlock - 1));
  kb.when(kb.lt(last, total), [&] { items(false); });
  kb.when(kb.lt(kb.sub(total, kb.idx(1)), last), [&] { items(true); });
}

SmallVector<Value> mlir::mhc::chunkLoop(
    KernelBuilder &kb, int64_t chunks, int threads, int unroll, ValueRange init,
    function_ref<SmallVector<Value>(Value, ValueRange)> body) {
  while (unroll > 1 && chunks % (static_cast<int64_t>(unroll) * threads) != 0)
    unroll /= 2;
  unroll = std::max(unroll, 1);
  return kb.loop(kb.threadId(), kb.idx(chunks), kb.idx(unroll * threads), init,
                 [&](Value chunk, ValueRange it) {
                   SmallVector<Value> vals(it.begin(), it.end());
                   for (int u = 0; u < unroll; ++u)
                     vals = body(kb.add(chunk, kb.idx(u * threads)), vals);
                   return vals;
                 });
}

Value mlir::mhc::blockSum(KernelBuilder &kb, int threads, Value scratch,
                         ArrayRef<Value> values) {
  int64_t warps = threads / 32;
  int64_t count = values.size();
  Value tid = kb.threadId();
  Value lane = kb.rem(tid, kb.idx(32));
  Value warp = kb.div(tid, kb.idx(32));
  // Warp totals go to scratch one value at a time (few live registers);
  // every lane stores the same total, so no branch is needed.
  (void)lane;
  for (int64_t v = 0; v < count; ++v)
    kb.store(kb.warpSum(values[v]), scratch,
             kb.add(kb.mul(warp, kb.idx(count)), kb.idx(v)));
  kb.barrier();
  // Thread v adds value v's warp totals in warp order.
  Value v = kb.min(tid, kb.idx(count - 1));
  Value sum = kb.load(scratch, v);
  for (int64_t w = 1; w < warps; ++w)
    sum = kb.add(sum, kb.load(scratch, kb.add(kb.idx(w * count), v)));
  kb.barrier();
  return sum;
}

void mlir::mhc::emitColumnSum(
    KernelContext &ctx, const std::string &src, int64_t width,
    ArrayRef<std::pair<std::string, int64_t>> dsts) {
  const ::mhc::BufferDesc *srcDesc = ctx.manifest.buffer(src);
  int64_t blocks = ctx.persistentBlocks();
  const int threads = 256;
  int64_t wc = std::gcd(width, static_cast<int64_t>(
                                   16 / ::mhc::byteWidth(srcDesc->dtype)));
  int64_t colChunks = width / wc;
  // Token lanes: with few columns, threads split the tokens too.
  int64_t lanes = colChunks >= threads ? 1 : threads / colChunks;
  int64_t slots = colChunks >= threads ? (colChunks + threads - 1) / threads : 1;
  std::string partials = src + "_partials";
  ctx.buffer(partials, ::mhc::DType::F32, ::mhc::BufferRole::Workspace,
             {0, blocks * width});

  {
    LaunchBuilder &l = ctx.launch(src + "_colsum");
    l.param(src).param(partials).param("M").block(threads).grid({0, blocks});
    if (lanes > 1)
      l.sharedF32(threads * wc);
    KernelBuilder kb = ctx.begin(l);
    Value tid = kb.threadId(), bid = kb.blockId();
    Value lane = lanes > 1 ? kb.div(tid, kb.idx(colChunks)) : kb.idx(0);
    Value cc0 = lanes > 1 ? kb.rem(tid, kb.idx(colChunks)) : tid;
    SmallVector<Value> init(slots * wc, kb.f32(0.0));
    Value first = kb.add(kb.mul(bid, kb.idx(lanes)), lane);
    Value step = kb.idx(blocks * lanes);
    Value active = kb.lt(tid, kb.idx(lanes * colChunks));
    SmallVector<Value> acc =
        kb.loop(first, l.tokens(), step, init, [&](Value m, ValueRange it) {
          SmallVector<Value> next(it.begin(), it.end());
          for (int64_t s = 0; s < slots; ++s) {
            Value cc = kb.add(cc0, kb.idx(s * threads));
            Value ok = kb.andi(active, kb.lt(cc, kb.idx(colChunks)));
            // Out-of-range threads read column 0 and discard it.
            Value off = kb.add(kb.mul(m, kb.idx(width)),
                               kb.mul(kb.select(ok, cc, kb.idx(0)), kb.idx(wc)));
            SmallVector<Value> v = kb.loadF32(l.arg(src), off, wc);
            for (int64_t e = 0; e < wc; ++e)
              next[s * wc + e] = kb.select(ok, kb.add(next[s * wc + e], v[e]),
                                           next[s * wc + e]);
          }
          return next;
        });
    auto writePartial = [&](Value cc, ArrayRef<Value> vals) {
      Value off = kb.add(kb.mul(bid, kb.idx(width)), kb.mul(cc, kb.idx(wc)));
      for (int64_t e = 0; e < wc; ++e)
        kb.store(vals[e], l.arg(partials), kb.add(off, kb.idx(e)));
    };
    if (lanes == 1) {
      for (int64_t s = 0; s < slots; ++s) {
        Value cc = kb.add(cc0, kb.idx(s * threads));
        kb.when(kb.lt(cc, kb.idx(colChunks)), [&] {
          writePartial(cc, ArrayRef<Value>(acc).slice(s * wc, wc));
        });
      }
    } else {
      Value smem = l.shared();
      kb.when(active, [&] {
        for (int64_t e = 0; e < wc; ++e)
          kb.store(acc[e], smem, kb.add(kb.mul(tid, kb.idx(wc)), kb.idx(e)));
      });
      kb.barrier();
      // Lane 0 sums the lanes in order.
      kb.when(kb.lt(tid, kb.idx(colChunks)), [&] {
        SmallVector<Value> total;
        for (int64_t e = 0; e < wc; ++e) {
          Value sum = kb.f32(0.0);
          for (int64_t ln = 0; ln < lanes; ++ln)
            sum = kb.add(sum, kb.load(smem, kb.add(kb.mul(kb.add(tid, kb.idx(ln * colChunks)), kb.idx(wc)), kb.idx(e))));
          total.push_back(sum);
        }
        writePartial(tid, total);
      });
    }
  }

  emitColumnSumFinal(ctx, partials, width, dsts);
}

void mlir::mhc::emitColumnSumFinal(
    KernelContext &ctx, const std::string &partials, int64_t width,
    ArrayRef<std::pair<std::string, int64_t>> dsts, int64_t rows) {
  int64_t blocks = rows > 0 ? rows : ctx.persistentBlocks();
  const int threads = 256;
  // Many rows: a warp per column, each lane adding every 32nd row, then a
  // butterfly (fixed order both ways). Few rows: a thread per column.
  bool warpPerColumn = blocks >= 64;
  int64_t columnsPerBlock = warpPerColumn ? threads / 32 : threads;
  LaunchBuilder &l = ctx.launch(partials + "_final");
  int64_t finalBlocks = (width + columnsPerBlock - 1) / columnsPerBlock;
  l.param(partials);
  for (auto &[name, count] : dsts)
    l.param(name);
  l.block(threads).grid({0, finalBlocks});
  KernelBuilder kb = ctx.begin(l);
  Value tid = kb.threadId();
  Value lane = warpPerColumn ? kb.rem(tid, kb.idx(32)) : kb.idx(0);
  Value local = warpPerColumn ? kb.div(tid, kb.idx(32)) : tid;
  Value col = kb.add(kb.mul(kb.blockId(), kb.idx(columnsPerBlock)), local);
  Value inRange = kb.lt(col, kb.idx(width));
  Value safeCol = kb.select(inRange, col, kb.idx(0));
  SmallVector<Value> sum = kb.loop(
      lane, kb.idx(blocks), kb.idx(warpPerColumn ? 32 : 1),
      ValueRange{kb.f32(0.0)}, [&](Value g, ValueRange it) -> SmallVector<Value> {
        Value v = kb.load(l.arg(partials), kb.add(kb.mul(g, kb.idx(width)), safeCol));
        return {kb.add(it[0], v)};
      });
  Value total = warpPerColumn ? kb.warpSum(sum[0]) : sum[0];
  Value writer = warpPerColumn ? kb.andi(inRange, kb.eq(lane, kb.idx(0))) : inRange;
  kb.when(writer, [&] {
    int64_t start = 0;
    for (auto &[name, count] : dsts) {
      Value lo = kb.idx(start), hi = kb.idx(start + count);
      Value in = kb.andi(kb.lt(col, hi), kb.select(kb.lt(col, lo), kb.boolean(false),
                                                   kb.boolean(true)));
      Value dst = l.arg(name);
      kb.when(in, [&] { kb.storeFrom({total}, dst, kb.sub(col, lo)); });
      start += count;
    }
  });
}
