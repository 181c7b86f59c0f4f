//===- Pre.cpp - one layer's pre step, fused ------------------------------===//
//
// project -> scale -> sinkhorn -> aggregate as the projection's partial
// launches plus one "tail" launch with a block per token: the block stages
// the token's split-K partials in shared memory and sums them (h, ms),
// scales the logits, one thread runs the Sinkhorn iterations while warps
// 1.. write y = pre . x. Three launches
// instead of six: at small M the pre step is bound by the host's launches
// and allocations, not by the GPU. Every value is computed by the same
// instructions in the same order as in the separate kernels (the same
// partials, the reduce's in-order sum, scaleLogit/scaleSquash,
// emitSinkhornPlan, the aggregate's fma chain), so the fused and the
// separate ops agree bit for bit. All intermediates are outputs: the
// gradient needs h, ms, pre and logits.
//
//===----------------------------------------------------------------------===//

#include "builder/Streams.h"
#include "kernels/Kernels.h"
#include "kernels/project/Project.h"

using namespace mlir;
using namespace mlir::mhc;
using ::mhc::BufferRole;
using ::mhc::DType;

static LogicalResult buildTail(KernelContext &ctx);

LogicalResult mlir::mhc::buildPre(KernelContext &ctx) {
  if (ctx.spec.dir != ::mhc::Direction::Forward)
    return buildPreBackward(ctx);
  if (ctx.spec.cooperative)
    return buildPreOneLaunch(ctx);
  if (failed(buildProjectForwardPartials(ctx)))
    return failure();
  return buildTail(ctx);
}

LogicalResult mlir::mhc::buildPreTail(KernelContext &ctx) {
  int64_t N = ctx.N();
  ctx.buffer("partials", DType::F32, BufferRole::Input, {0, 0, N + 1});
  ctx.buffer("x", ctx.spec.act, BufferRole::Input, {ctx.K(), 0});
  ctx.buffer("h", DType::F32, BufferRole::Output, {N, 0});
  ctx.buffer("ms", DType::F32, BufferRole::Output, {1, 0});
  return buildTail(ctx);
}

void mlir::mhc::declarePreTailIO(KernelContext &ctx) {
  const ::mhc::KernelSpec &spec = ctx.spec;
  int64_t n = ctx.n(), N = ctx.N(), C = ctx.C();
  ctx.buffer("alpha", spec.param, BufferRole::Input, {0, 3});
  ctx.buffer("beta", spec.param, BufferRole::Input, {0, N});
  ctx.buffer("pre", DType::F32, BufferRole::Output, {n, 0});
  ctx.buffer("post", DType::F32, BufferRole::Output, {n, 0});
  ctx.buffer("logits", DType::F32, BufferRole::Output, {n * n, 0});
  ctx.buffer("P", DType::F32, BufferRole::Output, {n * n, 0});
  ctx.buffer("y", spec.act, BufferRole::Output, {C, 0});
}

/// Token m's partials [S, M, width] into `parts` ([S, width]; S <=
/// forwardSplitBound), every thread's loads (up to 16) issued before it
/// stores any: at few tokens S is the SM count, and a thread per column
/// loading its S values in sequence waited ceil(S / 16) round trips.
static void stagePartials(KernelBuilder &kb, Value part, Value m, Value stride, Value S,
                          int64_t width, int threads, Value parts) {
  constexpr int64_t kInFlight = 16;
  Value total = kb.mul(S, kb.idx(width)), w = kb.idx(width);
  kb.loop(kb.threadId(), total, kb.idx(threads * kInFlight), [&](Value e0) {
    SmallVector<Value> at, ok, v;
    for (int64_t u = 0; u < kInFlight; ++u) {
      at.push_back(kb.add(e0, kb.idx(u * threads)));
      ok.push_back(kb.lt(at[u], total));
      Value e = kb.select(ok[u], at[u], e0); // e0 < total
      v.push_back(kb.load(part, kb.add(kb.mul(kb.div(e, w), stride),
                                       kb.add(kb.mul(m, w), kb.rem(e, w)))));
    }
    for (int64_t u = 0; u < kInFlight; ++u)
      kb.when(ok[u], [&] { kb.store(v[u], parts, at[u]); });
  });
  kb.barrier();
}

/// The tail's threads that write y: warps 1.. (warp 0's thread 0 is in the
/// Sinkhorn), or the block's one warp (after it). `first` is the first of
/// them, `count` how many; the prefetch of their x takes the same split.
struct TailYThreads {
  int64_t first, count;
};
static TailYThreads tailYThreads(int threads) {
  int64_t first = threads > 32 ? 32 : 0;
  return {first, threads - first};
}

/// y = sum_i pre_i x_i for token m with the aggregate kernel's fma chain,
/// by tailYThreads. A thread's chunks, up to 4 a step, are all loaded before the
/// first is summed: the token's row is one round of loads, not one a chunk.
static void emitTailAggregate(KernelBuilder &kb, KernelContext &ctx, LaunchBuilder &l,
                              Value m, ArrayRef<Value> pre, int threads) {
  int64_t n = ctx.n(), C = ctx.C(), w = ctx.streamWidth(), chunks = C / w;
  TailYThreads ys = tailYThreads(threads);
  int64_t first = ys.first, T = ys.count;
  int64_t U = std::min<int64_t>(4, (chunks + T - 1) / T);
  Value t = kb.sub(kb.threadId(), kb.idx(first)); // used only where tid >= first
  auto rows = [&] {
    kb.loop(t, kb.idx(chunks), kb.idx(T * U), [&](Value c) {
      SmallVector<Value> chunk, valid;
      SmallVector<SmallVector<SmallVector<Value>>> xs;
      for (int64_t u = 0; u < U; ++u) {
        chunk.push_back(kb.add(c, kb.idx(u * T)));
        valid.push_back(kb.lt(chunk[u], kb.idx(chunks)));
        Value at = kb.select(valid[u], chunk[u], c); // c < chunks
        xs.push_back(loadStreams(kb, ctx, l.arg("x"), m, kb.mul(at, kb.idx(w)), w));
      }
      for (int64_t u = 0; u < U; ++u)
        kb.when(valid[u], [&] {
          SmallVector<Value> y;
          for (int64_t e = 0; e < w; ++e) {
            Value acc = kb.mul(pre[0], xs[u][0][e]);
            for (int64_t i = 1; i < n; ++i)
              acc = kb.fma(pre[i], xs[u][i][e], acc);
            y.push_back(acc);
          }
          kb.storeFrom(y, l.arg("y"), kb.add(kb.mul(m, kb.idx(C)), kb.mul(chunk[u], kb.idx(w))));
        });
    });
  };
  if (first == 0)
    return rows();
  kb.when(kb.lt(kb.idx(first - 1), kb.threadId()), rows);
}

/// Asks L1 for the lines of token m's x that this thread's y chunks will
/// read (emitTailAggregate's assignment), so that their L2 round trip runs
/// beside the sums and the scale: 0.3-0.5 us of the tail at n = 4, C = 4096
/// and 7168 (docs/design/serve.md). Layout (C, n) only (a chunk's n * w
/// values are one run; (n, C) measured no gain), and only where the blocks
/// fit one per SM (M at most the SM count): more would evict each other's.
static void prefetchTailRow(KernelBuilder &kb, KernelContext &ctx, LaunchBuilder &l,
                            Value m, int threads) {
  if (ctx.spec.layout != ::mhc::Layout::CN)
    return;
  int64_t n = ctx.n(), C = ctx.C(), w = ctx.streamWidth(), chunks = C / w;
  TailYThreads ys = tailYThreads(threads);
  int64_t first = ys.first, T = ys.count;
  Value t = kb.sub(kb.threadId(), kb.idx(first));
  Value fits = kb.lt(l.tokens(), kb.idx(ctx.smCount() + 1));
  Value mine = first ? kb.lt(kb.idx(first - 1), kb.threadId()) : kb.boolean(true);
  kb.when(kb.andi(fits, mine), [&] {
    kb.loop(t, kb.idx(chunks), kb.idx(T), [&](Value c) {
      Value at = kb.mul(kb.add(kb.mul(m, kb.idx(C)), kb.mul(c, kb.idx(w))), kb.idx(n));
      kb.prefetchL1(kb.globalPtr(l.arg("x"), at));
    });
  });
}

/// The tail launch and its buffers, after the projection's partials.
static LogicalResult buildTail(KernelContext &ctx) {
  const ::mhc::KernelSpec &spec = ctx.spec;
  int64_t n = ctx.n(), N = ctx.N(), C = ctx.C();
  int64_t w = ctx.streamWidth(), chunks = C / w;
  declarePreTailIO(ctx);

  // Enough warps for the chunks (<= 256 threads) and for a thread per
  // partial column (N + 1 <= 81).
  int64_t want = std::max<int64_t>(std::min<int64_t>(chunks, 256), N + 1);
  int threads = static_cast<int>(std::min<int64_t>(256, (want + 31) / 32 * 32));
  LaunchBuilder &l = ctx.launch("tail");
  l.param("partials").param("alpha").param("beta").param("x").param("h")
      .param("ms").param("pre").param("post").param("logits").param("P")
      .param("y").param("M").param("S").block(threads).grid({1, 0})
      .sharedF32(N + 1, 16).sharedF32(N, 16) // 16: read back as vectors
      .sharedF32(forwardSplitBound(ctx) * (N + 1)); // the partials of every split
  KernelBuilder kb = ctx.begin(l);
  Value M = l.tokens(), S = l.splits(), tid = kb.threadId();
  Value m = kb.blockId(), row = l.shared(0), mix = l.shared(1), parts = l.shared(2);
  Value width = kb.idx(N + 1);

  // h and ms: the token's partials staged in shared memory, then a thread
  // per column sums them in split order, as the projection's reduce launch
  // does (sumInOrder: the same bits).
  // S <= forwardSplitBound by the split rules; the min tells LLVM, whose
  // index arithmetic is then narrow (64-bit divisions cost 26 registers).
  S = kb.min(S, kb.idx(forwardSplitBound(ctx)));
  std::pair<Value, Value> ab = loadScaleParams(kb, spec, l); // ahead of the sums
  stagePartials(kb, l.arg("partials"), m, kb.mul(M, width), S, N + 1, threads, parts);
  prefetchTailRow(kb, ctx, l, m, threads);
  kb.when(kb.lt(tid, width), [&] {
    Value sum = kb.sumInOrder(kb.idx(0), S, kPartialsInFlight, [&](Value sp) {
      return kb.load(parts, kb.add(kb.mul(sp, width), tid));
    });
    storeTokenSum(ctx, l, kb, m, row, sum);
  });
  kb.barrier();

  // Scale, a thread per logit k: mix = [pre | post | logits].
  emitTokenScale(
      kb, spec, l, m, row, "post",
      [&] { return ab; },
      [&](Value k, Value pre) { kb.store(pre, mix, k); },
      [&](Value k, Value z) { kb.store(z, mix, kb.add(k, kb.idx(2 * n))); });
  kb.barrier();

  // Thread 0 runs the Sinkhorn iterations while warps 1.. write y.
  kb.when(kb.eq(tid, kb.idx(0)),
          [&] { emitTokenSinkhorn(kb, spec, l, m, mix, kb.idx(2 * n), "P"); });
  SmallVector<Value> pre;
  for (int64_t i = 0; i < n; ++i)
    pre.push_back(kb.load(mix, kb.idx(i)));
  emitTailAggregate(kb, ctx, l, m, pre, threads);
  return success();
}
