//===- Aggregate.cpp - y = pre . x and its gradient -----------------------===//
//
// Forward: a stream of (token, w-wide channel chunk) items in memory order
// (forEachItem), each read once and written once with 16-byte accesses.
// Backward: one block per token; gx is per element (plus acc, x's gradient
// from its other users, where the spec has it), gpre a block reduction
// over the token's channels in a fixed order. n = 4 and 8 in the (C, n)
// layout on sm_90+ (C % 32 == 0) feed the block's eight warps by bulk copies
// (TokenRing.cpp). The layer seam's token pass (buildAggregateGradPre)
// is the same backward without gx: gpre alone, in the same order.
//
//===----------------------------------------------------------------------===//

#include "builder/Streams.h"
#include "builder/TokenRing.h"
#include "kernels/Kernels.h"

using namespace mlir;
using namespace mlir::mhc;
using ::mhc::BufferRole;
using ::mhc::DType;

/// Threads for a per-token block: enough warps to cover the chunks, <= 256.
static int tokenBlockThreads(int64_t chunks) {
  int64_t t = ((chunks + 31) / 32) * 32;
  return static_cast<int>(std::min<int64_t>(256, std::max<int64_t>(32, t)));
}

static LogicalResult buildForward(KernelContext &ctx) {
  int64_t n = ctx.n(), C = ctx.C(), w = ctx.streamWidth();
  DType act = ctx.spec.act;
  ctx.buffer("x", act, BufferRole::Input, {n * C, 0});
  ctx.buffer("pre", DType::F32, BufferRole::Input, {n, 0});
  ctx.buffer("y", act, BufferRole::Output, {C, 0});

  StreamShape shape = streamShape(ctx, w, n * w, n);
  LaunchBuilder &l = ctx.launch("main");
  l.param("x").param("pre").param("y").param("M").block(shape.threads)
      .grid(shape.grid()).minBlocksPerSM(shape.minBlocks);
  KernelBuilder kb = ctx.begin(l);
  auto load = [&](Value m, Value chunk) { // the n streams, w values each
    SmallVector<Value> xs;
    for (auto &stream : loadStreams(kb, ctx, l.arg("x"), m, kb.mul(chunk, kb.idx(w)), w))
      xs.append(stream.begin(), stream.end());
    return xs;
  };
  auto pre = [&](Value m) { return loadRow(kb, l.arg("pre"), m, n); };
  auto finish = [&](Value m, Value chunk, ArrayRef<Value> xs, ArrayRef<Value> pre) {
    SmallVector<Value> y;
    for (int64_t e = 0; e < w; ++e) {
      Value acc = kb.mul(pre[0], xs[e]);
      for (int64_t i = 1; i < n; ++i)
        acc = kb.fma(pre[i], xs[i * w + e], acc);
      y.push_back(acc);
    }
    kb.storeFrom(y, l.arg("y"), kb.add(kb.mul(m, kb.idx(C)), kb.mul(chunk, kb.idx(w))));
  };
  forEachItem(kb, l, shape, load, pre, finish);
  return success();
}

/// The backward's launch "main" and its parameters, in the buffers' order
/// (`withGx` false: the seam's token pass, gpre alone).
static LaunchBuilder &backwardLaunch(KernelContext &ctx, bool withGx) {
  LaunchBuilder &l = ctx.launch("main");
  l.param("gy").param("x");
  if (withGx)
    l.param("pre");
  if (withGx && ctx.spec.readsAcc())
    l.param("acc");
  if (withGx)
    l.param("gx");
  return l.param("gpre").param("M");
}

/// The backward fed by bulk copies (TokenRing): gy, x (and acc) per piece,
/// pre and the n sums of gpre in registers.
static void buildBackwardRing(KernelContext &ctx, bool withGx) {
  int64_t n = ctx.n();
  bool acc = withGx && ctx.spec.readsAcc();
  SmallVector<int64_t> values = {1, n};
  if (acc)
    values.push_back(n);
  TokenRing ring(ctx, values);
  LaunchBuilder &l = backwardLaunch(ctx, withGx);
  ring.configure(l, n);
  KernelBuilder kb = ctx.begin(l);
  SmallVector<Value> srcs = {l.arg("gy"), l.arg("x")};
  if (acc)
    srcs.push_back(l.arg("acc"));
  ring.start(kb, l, srcs);
  Value m = ring.token;
  SmallVector<Value> pre;
  if (withGx)
    pre = loadRow(kb, l.arg("pre"), m, n);
  SmallVector<Value> zeros(n, kb.f32(0.0));
  Type act = elementType(kb.b.getContext(), ctx.spec.act);
  SmallVector<Value> partial = ring.loop(
      kb, l, srcs, act, zeros,
      [&](Value chan, ArrayRef<SmallVector<Value>> vals, SmallVector<Value> &sums) {
        Value gy = vals[0][0];
        SmallVector<SmallVector<Value>> gx(n);
        for (int64_t i = 0; i < n; ++i) {
          if (withGx) {
            Value own = kb.mul(pre[i], gy);
            gx[i].push_back(acc ? plusAcc(kb, ctx.spec, own, vals[2][i]) : own);
          }
          sums[i] = kb.fma(gy, vals[1][i], sums[i]);
        }
        if (withGx)
          storeStreams(kb, ctx, l.arg("gx"), m, chan, gx);
      });
  Value tid = kb.threadId();
  Value total = blockSum(kb, 32 * TokenRing::kWarps, l.shared(0), partial);
  kb.when(kb.lt(tid, kb.idx(n)), [&] {
    kb.store(total, l.arg("gpre"), kb.add(kb.mul(m, kb.idx(n)), tid));
  });
}

/// gpre (and with `withGx` gx, plus acc where the spec has it) per token.
static LogicalResult buildBackward(KernelContext &ctx, bool withGx) {
  int64_t n = ctx.n(), C = ctx.C(), w = ctx.streamWidth(), chunks = C / w;
  DType act = ctx.spec.act;
  bool hasAcc = withGx && ctx.spec.readsAcc();
  ctx.buffer("gy", act, BufferRole::Input, {C, 0});
  ctx.buffer("x", act, BufferRole::Input, {n * C, 0});
  if (withGx) {
    ctx.buffer("pre", DType::F32, BufferRole::Input, {n, 0});
    declareAcc(ctx);
    ctx.buffer("gx", ctx.spec.gxType(), BufferRole::Output, {n * C, 0});
  }
  ctx.buffer("gpre", DType::F32, BufferRole::Output, {n, 0});

  // (The ring stages every source in the activation dtype: not TE's f32 buffer.)
  if (TokenRing::serves(ctx) && !ctx.spec.accF32) {
    buildBackwardRing(ctx, withGx);
    return success();
  }
  int threads = tokenBlockThreads(chunks);
  LaunchBuilder &l = backwardLaunch(ctx, withGx);
  l.block(threads).grid({1, 0}).sharedF32((threads / 32) * n);
  KernelBuilder kb = ctx.begin(l);
  Value m = kb.blockId();
  SmallVector<Value> pre;
  for (int64_t i = 0; withGx && i < n; ++i)
    pre.push_back(kb.load(l.arg("pre"), kb.add(kb.mul(m, kb.idx(n)), kb.idx(i))));
  SmallVector<Value> zeros(n, kb.f32(0.0));
  SmallVector<Value> partial = chunkLoop(
      kb, chunks, threads, 2, zeros,
      [&](Value chunk, ValueRange sums) {
        Value c0 = kb.mul(chunk, kb.idx(w));
        SmallVector<Value> gy =
            kb.loadF32(l.arg("gy"), kb.add(kb.mul(m, kb.idx(C)), c0), w);
        auto xs = loadStreams(kb, ctx, l.arg("x"), m, c0, w);
        SmallVector<SmallVector<Value>> acc;
        if (hasAcc)
          acc = loadStreams(kb, ctx, l.arg("acc"), m, c0, w);
        SmallVector<SmallVector<Value>> gx(n);
        SmallVector<Value> next(sums.begin(), sums.end());
        for (int64_t i = 0; i < n; ++i)
          for (int64_t e = 0; e < w; ++e) {
            if (withGx) {
              Value own = kb.mul(pre[i], gy[e]);
              gx[i].push_back(acc.empty() ? own : plusAcc(kb, ctx.spec, own, acc[i][e]));
            }
            next[i] = kb.fma(gy[e], xs[i][e], next[i]);
          }
        if (withGx)
          storeStreams(kb, ctx, l.arg("gx"), m, c0, gx);
        return next;
      });
  Value total = blockSum(kb, threads, l.shared(), partial);
  Value tid = kb.threadId();
  kb.when(kb.lt(tid, kb.idx(n)), [&] {
    kb.store(total, l.arg("gpre"), kb.add(kb.mul(m, kb.idx(n)), tid));
  });
  return success();
}

LogicalResult mlir::mhc::buildAggregate(KernelContext &ctx) {
  return ctx.spec.dir == ::mhc::Direction::Forward ? buildForward(ctx)
                                                   : buildBackward(ctx, true);
}

LogicalResult mlir::mhc::buildAggregateGradPre(KernelContext &ctx) {
  assert(ctx.spec.dir == ::mhc::Direction::Backward);
  return buildBackward(ctx, false);
}
