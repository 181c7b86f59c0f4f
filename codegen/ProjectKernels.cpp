//===- ProjectKernels.cpp - h = (x w) phi^T, ms = mean(x^2), gradient -----===//
//
// The projection is a skinny GEMM, [M, K] x [K, N] with K = n*C large and
// N = 2n + n^2 small, fused with the sum of squares. It reads xvec in memory
// order, so one kernel serves both layouts (phi's columns follow xvec).
//
// Forward: tensor cores, mma.sync m16n8k8 tf32. A warp owns 32 tokens (two
// m-tiles) and walks a range of 8s-wide K chunks. The contraction index is
// permuted inside each chunk so that every lane reads 2s *contiguous* x
// elements per row (16- or 32-byte loads) and the matching phi columns: lane
// (g, t) holds logical k = t and t + 4 of k-step q at physical k = t*2s + 2q
// and t*2s + 2q + 1, for A and B alike. bf16/f16 x is exact in tf32; without
// the op's tf32 flag, phi (and f32 x) are split into a round-to-nearest tf32
// high part and the rest and multiplied in two or three mma's, and each
// chunk's mma sum is added into an fp32 total with ordinary adds: fp32
// accuracy. Split-K over S ranges of chunks (S a function of M) writes
// fixed-order partials [S, M, N + 1] that a second launch sums in order.
//
// Backward: one fused pass over x. A block owns a slice of K columns and a
// fixed share of the tokens; each thread keeps its columns of phi in
// registers, writes gx per token, and accumulates its columns of gphi and gw
// over its tokens. The per-share partials are summed in order by a second
// launch: deterministic, no atomics.
//
//===----------------------------------------------------------------------===//

#include "Families.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include <numeric>

using namespace mlir;
using namespace mlir::mhc;
using ::mhc::BufferRole;
using ::mhc::DType;

namespace {

/// Loads `count` consecutive elements as f32 in accesses of at most 16 bytes.
SmallVector<Value> loadRun(KernelBuilder &kb, Value mem, Value offset,
                           int64_t count) {
  int64_t bytes = cast<MemRefType>(mem.getType()).getElementTypeBitWidth() / 8;
  int64_t piece = std::min<int64_t>(count, 16 / bytes);
  SmallVector<Value> out;
  for (int64_t i = 0; i < count; i += piece) {
    SmallVector<Value> part = kb.loadF32(mem, kb.add(offset, kb.idx(i)), piece);
    out.append(part.begin(), part.end());
  }
  return out;
}

/// v rounded to tf32 (10 mantissa bits), to nearest: unbiased, unlike the
/// truncation the tensor core applies to its operands.
Value roundTf32(KernelBuilder &kb, Value v) {
  Value bits = arith::BitcastOp::create(kb.b, kb.loc, kb.b.getI32Type(), v);
  Value rounded = arith::AddIOp::create(kb.b, kb.loc, bits, kb.i32(0x1000));
  Value mask = kb.i32(static_cast<int32_t>(0xFFFFE000u));
  return arith::BitcastOp::create(kb.b, kb.loc, kb.b.getF32Type(),
                                  kb.andi(rounded, mask));
}

/// v = hi + lo with hi the nearest tf32 value and lo the (rounded) rest:
/// hi * b + lo * b carries ~21 bits of v.
std::pair<Value, Value> splitTf32(KernelBuilder &kb, Value v) {
  Value hi = roundTf32(kb, v);
  return {hi, roundTf32(kb, kb.sub(v, hi))};
}

Value fragment(KernelBuilder &kb, ArrayRef<Value> elems) {
  auto type = VectorType::get({static_cast<int64_t>(elems.size()), 1},
                              kb.b.getF32Type());
  return vector::FromElementsOp::create(kb.b, kb.loc, type, elems);
}

Value mma(KernelBuilder &kb, Value a, Value b, Value c) {
  return nvgpu::MmaSyncOp::create(kb.b, kb.loc, a, b, c,
                                  ArrayRef<int64_t>{16, 8, 8},
                                  /*tf32Enabled=*/true);
}

} // namespace

static LogicalResult buildForward(KernelContext &ctx) {
  const ::mhc::KernelSpec &spec = ctx.spec;
  int64_t N = ctx.N(), K = ctx.K();
  // Chunk = 8s columns, s k-steps: the largest s in {8, 4, 2, 1} with
  // K % 8s == 0 (unsupportedReason guarantees K % 8 == 0).
  int64_t s = 8;
  while (K % (8 * s) != 0)
    s /= 2;
  int64_t nTiles = (N + 7) / 8;
  bool precise = !spec.tf32;
  // Registers per lane: accumulators (twice in precise mode), the B values
  // of a chunk and the x values. Large n (many n-tiles) takes one m-tile per
  // warp and narrower chunks.
  int64_t mTiles = 2;
  auto regs = [&](int64_t mt, int64_t ss) {
    return mt * nTiles * 4 * (precise ? 2 : 1) + nTiles * 2 * ss + mt * 4 * ss;
  };
  if (regs(mTiles, 1) > 160)
    mTiles = 1;
  while (s > 1 && regs(mTiles, s) > 160)
    s /= 2;
  int64_t chunkK = 8 * s, chunks = K / chunkK;
  const int warps = 4, threads = 32 * warps;
  int64_t tokensPerBlock = warps * mTiles * 16;
  bool splitX = precise && spec.act == DType::F32;

  ctx.manifest.split = {tokensPerBlock, ctx.persistentBlocks(),
                        std::min<int64_t>(64, chunks)};
  ctx.buffer("x", spec.act, BufferRole::Input, {K, 0});
  ctx.buffer("phi", spec.param, BufferRole::Input, {0, N * K});
  if (spec.hasWeight)
    ctx.buffer("weight", spec.param, BufferRole::Input, {0, K});
  ctx.buffer("h", DType::F32, BufferRole::Output, {N, 0});
  ctx.buffer("ms", DType::F32, BufferRole::Output, {1, 0});
  ctx.buffer("partials", DType::F32, BufferRole::Workspace, {0, 0, N + 1});

  {
    LaunchBuilder &l = ctx.launch("partial");
    l.param("x").param("phi");
    if (spec.hasWeight)
      l.param("weight");
    l.param("partials").param("M").param("S").block(threads)
        .grid({tokensPerBlock, 0, /*timesSplit=*/true});
    KernelBuilder kb = ctx.begin(l);
    Value M = l.tokens(), S = l.splits();
    Value tid = kb.threadId(), bid = kb.blockId();
    Value lane = kb.rem(tid, kb.idx(32)), warp = kb.div(tid, kb.idx(32));
    Value g = kb.div(lane, kb.idx(4)), t = kb.rem(lane, kb.idx(4));
    Value mBlock = kb.div(bid, S), split = kb.rem(bid, S);
    Value cBegin = kb.div(kb.mul(split, kb.idx(chunks)), S);
    Value cEnd = kb.div(kb.mul(kb.add(split, kb.idx(1)), kb.idx(chunks)), S);
    Value lastRow = kb.sub(M, kb.idx(1));

    // rows[mt][0/1]: tokens g and g + 8 of m-tile mt; clamped for loads.
    SmallVector<std::array<Value, 2>> rows, rowOff;
    for (int64_t mt = 0; mt < mTiles; ++mt) {
      Value base = kb.add(kb.mul(mBlock, kb.idx(tokensPerBlock)),
                          kb.add(kb.mul(warp, kb.idx(mTiles * 16)),
                                 kb.idx(mt * 16)));
      std::array<Value, 2> r = {kb.add(base, g),
                                kb.add(base, kb.add(g, kb.idx(8)))};
      rows.push_back(r);
      rowOff.push_back({kb.mul(kb.min(r[0], lastRow), kb.idx(K)),
                        kb.mul(kb.min(r[1], lastRow), kb.idx(K))});
    }
    SmallVector<Value> phiRowOff;
    SmallVector<Value> phiValid;
    for (int64_t nt = 0; nt < nTiles; ++nt) {
      Value row = kb.add(kb.idx(nt * 8), g);
      phiValid.push_back(kb.lt(row, kb.idx(N)));
      phiRowOff.push_back(kb.mul(kb.min(row, kb.idx(N - 1)), kb.idx(K)));
    }

    Value zero = kb.f32(0.0);
    Value zeroAcc = arith::ConstantOp::create(
        kb.b, kb.loc,
        DenseElementsAttr::get(VectorType::get({2, 2}, kb.b.getF32Type()),
                               0.0f));
    SmallVector<Value> init;
    for (int64_t i = 0; i < mTiles * nTiles; ++i)
      init.push_back(zeroAcc);
    for (int64_t i = 0; i < mTiles * 2; ++i)
      init.push_back(zero);
    SmallVector<Value> result = kb.loop(
        cBegin, cEnd, kb.idx(1), init, [&](Value c, ValueRange it) {
          SmallVector<Value> next(it.begin(), it.end());
          Value k0 = kb.add(kb.mul(c, kb.idx(chunkK)), kb.mul(t, kb.idx(2 * s)));
          // B: phi * weight at this lane's 2s columns, per n-tile.
          SmallVector<Value> w;
          if (spec.hasWeight)
            w = loadRun(kb, l.arg("weight"), k0, 2 * s);
          SmallVector<SmallVector<Value>> bv(nTiles);
          for (int64_t nt = 0; nt < nTiles; ++nt) {
            bv[nt] = loadRun(kb, l.arg("phi"), kb.add(phiRowOff[nt], k0), 2 * s);
            for (int64_t e = 0; e < 2 * s; ++e) {
              if (spec.hasWeight)
                bv[nt][e] = kb.mul(bv[nt][e], w[e]);
              bv[nt][e] = kb.select(phiValid[nt], bv[nt][e], zero);
            }
          }
          // In precise mode the tensor core accumulates one chunk only; the
          // chunk sums are added into the totals with IEEE fp32 adds, so its
          // truncating accumulation never runs over more than 8s columns.
          SmallVector<Value> total;
          if (precise)
            for (int64_t i = 0; i < mTiles * nTiles; ++i) {
              total.push_back(next[i]);
              next[i] = zeroAcc;
            }
          for (int64_t mt = 0; mt < mTiles; ++mt) {
            std::array<SmallVector<Value>, 2> xv;
            for (int h = 0; h < 2; ++h) {
              xv[h] = loadRun(kb, l.arg("x"), kb.add(rowOff[mt][h], k0), 2 * s);
              Value &ms = next[mTiles * nTiles + mt * 2 + h];
              for (Value v : xv[h])
                ms = kb.fma(v, v, ms);
            }
            for (int64_t q = 0; q < s; ++q) {
              SmallVector<Value> a = {xv[0][2 * q], xv[1][2 * q],
                                      xv[0][2 * q + 1], xv[1][2 * q + 1]};
              SmallVector<Value> aHi = a, aLo;
              if (splitX) {
                aHi.clear();
                for (Value v : a) {
                  auto [hi, lo] = splitTf32(kb, v);
                  aHi.push_back(hi);
                  aLo.push_back(lo);
                }
              }
              Value A = fragment(kb, aHi);
              Value ALo = splitX ? fragment(kb, aLo) : Value();
              for (int64_t nt = 0; nt < nTiles; ++nt) {
                Value &acc = next[mt * nTiles + nt];
                Value b0 = bv[nt][2 * q], b1 = bv[nt][2 * q + 1];
                if (!precise) {
                  acc = mma(kb, A, fragment(kb, {b0, b1}), acc);
                  continue;
                }
                auto [h0, l0] = splitTf32(kb, b0);
                auto [h1, l1] = splitTf32(kb, b1);
                Value BHi = fragment(kb, {h0, h1});
                acc = mma(kb, A, BHi, acc);
                acc = mma(kb, A, fragment(kb, {l0, l1}), acc);
                if (splitX)
                  acc = mma(kb, ALo, BHi, acc);
              }
            }
          }
          if (precise)
            for (int64_t i = 0; i < mTiles * nTiles; ++i)
              next[i] = kb.add(total[i], next[i]);
          return next;
        });

    // Sum of squares: combine the four lanes of each row group (fixed order).
    Value ws = l.arg("partials");
    for (int64_t mt = 0; mt < mTiles; ++mt)
      for (int h = 0; h < 2; ++h) {
        Value v = result[mTiles * nTiles + mt * 2 + h];
        for (int offset : {1, 2}) {
          auto sh = gpu::ShuffleOp::create(kb.b, kb.loc, v, offset, 32,
                                           gpu::ShuffleMode::XOR);
          v = kb.add(v, sh.getShuffleResult());
        }
        Value row = rows[mt][h];
        Value base = kb.mul(kb.add(kb.mul(split, M), row), kb.idx(N + 1));
        kb.when(kb.lt(row, M), [&] {
          kb.when(kb.eq(t, kb.idx(0)),
                  [&] { kb.store(v, ws, kb.add(base, kb.idx(N))); });
          for (int64_t nt = 0; nt < nTiles; ++nt) {
            Value acc = result[mt * nTiles + nt];
            for (int64_t e = 0; e < 2; ++e) {
              Value col = kb.add(kb.idx(nt * 8 + e), kb.mul(t, kb.idx(2)));
              Value val = vector::ExtractOp::create(
                  kb.b, kb.loc, acc, ArrayRef<int64_t>{h, e});
              kb.when(kb.lt(col, kb.idx(N)),
                      [&] { kb.store(val, ws, kb.add(base, col)); });
            }
          }
        });
      }
  }

  {
    const int rthreads = 128;
    LaunchBuilder &l = ctx.launch("reduce");
    l.param("partials").param("h").param("ms").param("M").param("S")
        .block(rthreads).grid({rthreads, 0});
    KernelBuilder kb = ctx.begin(l);
    Value M = l.tokens();
    Value m = kb.add(kb.mul(kb.blockId(), kb.idx(rthreads)), kb.threadId());
    kb.when(kb.lt(m, M), [&] {
      SmallVector<Value> init(N + 1, kb.f32(0.0));
      SmallVector<Value> sum = kb.loop(
          kb.idx(0), l.splits(), kb.idx(1), init, [&](Value sp, ValueRange it) {
            Value base = kb.mul(kb.add(kb.mul(sp, M), m), kb.idx(N + 1));
            SmallVector<Value> next;
            for (int64_t col = 0; col <= N; ++col)
              next.push_back(kb.add(
                  it[col], kb.load(l.arg("partials"), kb.add(base, kb.idx(col)))));
            return next;
          });
      for (int64_t col = 0; col < N; ++col)
        kb.store(sum[col], l.arg("h"), kb.add(kb.mul(m, kb.idx(N)), kb.idx(col)));
      kb.store(kb.div(sum[N], kb.f32(static_cast<double>(K))), l.arg("ms"), m);
    });
  }
  return success();
}

static LogicalResult buildBackward(KernelContext &ctx) {
  const ::mhc::KernelSpec &spec = ctx.spec;
  int64_t N = ctx.N(), K = ctx.K();
  bool hasW = spec.hasWeight;
  // Columns per thread: as many as keep phi and gphi's columns in registers.
  // Past that (n >= 6), phi's columns wait in shared memory instead.
  int64_t cw = std::gcd(K, std::max<int64_t>(1, std::min<int64_t>(4, 64 / N)));
  bool phiShared = N * cw > 48;
  const int threads = phiShared ? 128 : 256;
  // gphi's rows are split into groups of at most 24 so that their two-level
  // sums fit in registers; each group's blocks re-read x (only for n >= 6).
  int64_t groups = phiShared ? (N + 23) / 24 : 1;
  int64_t rowsPer = (N + groups - 1) / groups;
  int64_t slices = (K + threads * cw - 1) / (threads * cw);
  int64_t shares = std::max<int64_t>(1, ctx.persistentBlocks() / slices);
  int64_t width = N * K + (hasW ? K : 0); // gphi, then gw

  ctx.buffer("gh", DType::F32, BufferRole::Input, {N, 0});
  ctx.buffer("gms", DType::F32, BufferRole::Input, {1, 0});
  ctx.buffer("x", spec.act, BufferRole::Input, {K, 0});
  ctx.buffer("phi", spec.param, BufferRole::Input, {0, N * K});
  if (hasW)
    ctx.buffer("weight", spec.param, BufferRole::Input, {0, K});
  ctx.buffer("gx", spec.act, BufferRole::Output, {K, 0});
  ctx.buffer("gphi", spec.param, BufferRole::Output, {0, N * K});
  if (hasW)
    ctx.buffer("gweight", spec.param, BufferRole::Output, {0, K});
  ctx.buffer("partials", DType::F32, BufferRole::Workspace, {0, shares * width});

  {
    LaunchBuilder &l = ctx.launch("main");
    l.param("gh").param("gms").param("x").param("phi");
    if (hasW)
      l.param("weight");
    l.param("gx").param("partials").param("M").block(threads)
        .grid({0, slices * shares * groups});
    if (phiShared)
      l.sharedF32(N * threads * cw);
    KernelBuilder kb = ctx.begin(l);
    Value M = l.tokens();
    Value bid = kb.blockId();
    Value slice = kb.rem(bid, kb.idx(slices));
    Value share = kb.rem(kb.div(bid, kb.idx(slices)), kb.idx(shares));
    Value group = kb.div(bid, kb.idx(slices * shares));
    Value rowBase = kb.mul(group, kb.idx(rowsPer));
    Value firstGroup = kb.eq(group, kb.idx(0));
    Value k0raw = kb.mul(kb.add(kb.mul(slice, kb.idx(threads)), kb.threadId()),
                         kb.idx(cw));
    Value active = kb.lt(k0raw, kb.idx(K));
    Value k0 = kb.select(active, k0raw, kb.idx(0));
    // This share's tokens: [share * per, min(M, (share + 1) * per)).
    Value per = kb.div(kb.add(M, kb.idx(shares - 1)), kb.idx(shares));
    Value mBegin = kb.min(kb.mul(share, per), M);
    Value mEnd = kb.min(kb.add(mBegin, per), M);

    // phiAt(r, e) = phi[r, k0 + e]: from registers, or from the block's
    // slice of phi in shared memory, [N][threads * cw], loaded cooperatively
    // (coalesced) before a barrier.
    SmallVector<SmallVector<Value>> phi(N);
    Value tid = kb.threadId();
    int64_t sliceCols = threads * cw;
    if (!phiShared) {
      for (int64_t r = 0; r < N; ++r)
        phi[r] = loadRun(kb, l.arg("phi"), kb.add(kb.idx(r * K), k0), cw);
    } else {
      Value sliceBase = kb.mul(slice, kb.idx(sliceCols));
      kb.loop(tid, kb.idx(N * sliceCols), kb.idx(threads), [&](Value i) {
        Value r = kb.div(i, kb.idx(sliceCols));
        Value col = kb.add(sliceBase, kb.rem(i, kb.idx(sliceCols)));
        Value ok = kb.lt(col, kb.idx(K));
        Value v = kb.load(l.arg("phi"),
                          kb.add(kb.mul(r, kb.idx(K)), kb.select(ok, col, kb.idx(0))));
        kb.store(kb.toF32(v), l.shared(), i);
      });
      kb.barrier();
    }
    Value myCol = kb.mul(tid, kb.idx(cw));
    auto phiAt = [&](int64_t r, int64_t e) -> Value {
      if (!phiShared)
        return phi[r][e];
      return kb.load(l.shared(), kb.add(kb.idx(r * sliceCols + e), myCol));
    };
    SmallVector<Value> w(cw, kb.f32(1.0));
    if (hasW)
      w = loadRun(kb, l.arg("weight"), k0, cw);
    Value twoOverK = kb.f32(2.0 / static_cast<double>(K));

    SmallVector<Value> init(rowsPer * cw + (hasW ? cw : 0), kb.f32(0.0));
    // Two-level sums over the tokens (runs of 32, then the runs), so the
    // rounding error grows like sqrt(32) + sqrt(M / 32), not sqrt(M).
    const int64_t run = 32;
    SmallVector<Value> acc = kb.loop(
        mBegin, mEnd, kb.idx(run), init, [&](Value m0, ValueRange outer) {
    SmallVector<Value> sums = kb.loop(
        m0, kb.min(kb.add(m0, kb.idx(run)), mEnd), kb.idx(1), init,
        [&](Value m, ValueRange it) {
          SmallVector<Value> next(it.begin(), it.end());
          Value gms = kb.mul(kb.load(l.arg("gms"), m), twoOverK);
          Value off = kb.add(kb.mul(m, kb.idx(K)), k0);
          SmallVector<Value> x = loadRun(kb, l.arg("x"), off, cw);
          Value ghRow = kb.mul(m, kb.idx(N));
          SmallVector<Value> d(cw, kb.f32(0.0));
          for (int64_t r = 0; r < N; ++r) {
            Value gh = kb.load(l.arg("gh"), kb.add(ghRow, kb.idx(r)));
            for (int64_t e = 0; e < cw; ++e) {
              d[e] = kb.fma(gh, phiAt(r, e), d[e]);
              if (groups == 1)
                next[r * cw + e] = kb.fma(gh, x[e], next[r * cw + e]);
            }
          }
          // This group's rows of gphi (rows past N contribute zero).
          for (int64_t lr = 0; groups > 1 && lr < rowsPer; ++lr) {
            Value r = kb.add(rowBase, kb.idx(lr));
            Value ok = kb.lt(r, kb.idx(N));
            Value gh = kb.load(l.arg("gh"), kb.add(ghRow, kb.select(ok, r, kb.idx(0))));
            gh = kb.select(ok, gh, kb.f32(0.0));
            for (int64_t e = 0; e < cw; ++e)
              next[lr * cw + e] = kb.fma(gh, x[e], next[lr * cw + e]);
          }
          SmallVector<Value> gx;
          for (int64_t e = 0; e < cw; ++e) {
            gx.push_back(kb.fma(d[e], w[e], kb.mul(gms, x[e])));
            if (hasW)
              next[rowsPer * cw + e] = kb.fma(d[e], x[e], next[rowsPer * cw + e]);
          }
          kb.when(kb.andi(active, firstGroup),
                  [&] { kb.storeFrom(gx, l.arg("gx"), off); });
          return next;
        });
    SmallVector<Value> total;
    for (auto [a, b] : llvm::zip(outer, sums))
      total.push_back(kb.add(a, b));
    return total;
        });
    kb.when(active, [&] {
      Value base = kb.mul(share, kb.idx(width));
      for (int64_t lr = 0; lr < rowsPer; ++lr) {
        Value r = kb.add(rowBase, kb.idx(lr));
        kb.when(kb.lt(r, kb.idx(N)), [&] {
          for (int64_t e = 0; e < cw; ++e)
            kb.store(kb.mul(acc[lr * cw + e], w[e]), l.arg("partials"),
                     kb.add(base, kb.add(kb.mul(r, kb.idx(K)), kb.add(kb.idx(e), k0))));
        });
      }
      if (hasW)
        kb.when(firstGroup, [&] {
          for (int64_t e = 0; e < cw; ++e)
            kb.store(acc[rowsPer * cw + e], l.arg("partials"),
                     kb.add(base, kb.add(kb.idx(N * K + e), k0)));
        });
    });
  }
  SmallVector<std::pair<std::string, int64_t>> dsts = {{"gphi", N * K}};
  if (hasW)
    dsts.push_back({"gweight", K});
  emitColumnSumFinal(ctx, "partials", width, dsts, shares);
  return success();
}

LogicalResult mlir::mhc::buildProject(KernelContext &ctx) {
  return ctx.spec.dir == ::mhc::Direction::Forward ? buildForward(ctx)
                                                   : buildBackward(ctx);
}
