//===- OneLaunch.cpp - pre.fwd / post_pre.fwd in one cooperative launch ---===//
//
// The decode-size forward (docs/design/serve.md): a fixed grid of G
// co-resident blocks, each owning a channel slice of C, runs
//   1. for every tile of tokens: x_next on its slice (the seam:
//      expand_combine's combineStream from layer l's x, f, post, P; the pre
//      step: x itself), stored, and its split-K partials of h and the sum of
//      squares over the slice (a fixed-order block sum) into partials
//      [M, N + 1, G];
//   grid barrier;
//   2. M <= tile (decode): every block sums pre's columns of every token
//      itself (the owners' order: the same bits), scales and runs Sinkhorn
//      for its own tokens (warp 0) while warps 1-7 write y from shared
//      memory: no second barrier;
//   3. M > tile: tokens b, b + G, ...: the partials summed, scale and
//      Sinkhorn (the pre tail's helpers); grid barrier; y = pre . x_next on
//      its slice for every token (the x_next it stored itself).
// Integer atomics only (SimtBuilder::gridBarrier); no float atomics.
// This file: the launch's parameters and shared memory, and the phases in
// order; Phases.h names the files that emit them.
//
//===----------------------------------------------------------------------===//

#include "kernels/Kernels.h"
#include "kernels/onelaunch/Phases.h"
#include "kernels/project/Project.h"
#include "kernels/seam/Contract.h"

using namespace mlir;
using namespace mlir::mhc;
using namespace mlir::mhc::onelaunch;
using ::mhc::BufferRole;
using ::mhc::DType;

namespace {

/// The launch's parameters and shared buffers (their indices: Shared).
enum Shared { kXs, kPhiS, kWS, kRed, kFin, kRow, kMix, kMixS, kFin2, kFinOwn, kPreS, kAbS };
LaunchBuilder &declareLaunch(KernelContext &ctx, bool expand, const Names &names,
                             const Plan &p) {
  int64_t n = ctx.n(), N = ctx.N(), width = p.width;
  LaunchBuilder &l = ctx.launch("one");
  if (expand) {
    l.param("f").param("post").param("x").param("P");
    if (ctx.spec.hasBias)
      l.param("bias");
    l.param("x_next");
  } else {
    l.param("x");
  }
  l.param("phi");
  if (ctx.spec.hasWeight)
    l.param("weight");
  bool stageW = p.stagePhi && ctx.spec.hasWeight;
  l.param("alpha").param("beta").param("h").param("ms").param("pre")
      .param(names.post).param("logits").param(names.P).param("y")
      .param("partials").param("M").param(::mhc::kSyncParam)
      .block(kThreads).grid({0, p.G}).cooperative().minBlocksPerSM(1);
  if (p.dependent)
    l.programmaticDependent();
  l
      .sharedF32(p.tile * p.Lp, 16)                       // xs
      .sharedF32(p.stagePhi ? N * p.Ls : 1, 16)            // phiS
      .sharedF32(stageW ? p.Lp : 1, 16)                    // wS
      .sharedF32(p.groups * p.tile * width, 16)            // red
      .sharedF32(p.finishRows * width, 16)                 // fin
      .sharedF32(width, 16)                                // row
      .sharedF32(N, 16)                                    // mix
      .sharedF32(expand ? p.tile * (n + n * n) : 1, 16)    // mixS
      .sharedF32(p.tile * (n + 1) * p.finishRows, 16)      // fin2
      .sharedF32(ownTokens(p) * (N - n) * p.finishRows, 16) // finOwn
      .sharedF32(p.tile * n, 16)                           // preS
      .sharedF32(2 * n, 16);                               // abS
  return l;
}

LogicalResult buildOneLaunch(KernelContext &ctx, bool expand, const Names &names) {
  int64_t n = ctx.n(), C = ctx.C();
  Plan p = planOneLaunch(ctx);
  int64_t G = p.G;
  ctx.buffer("partials", DType::F32, BufferRole::Workspace, {G * p.width, 0});
  LaunchBuilder &l = declareLaunch(ctx, expand, names, p);
  KernelBuilder kb = ctx.begin(l);
  Value M = l.tokens(), bid = kb.blockId(), tid = kb.threadId();
  Value c0 = kb.div(kb.mul(bid, kb.idx(C)), kb.idx(G));
  Value c1 = kb.div(kb.mul(kb.add(bid, kb.idx(1)), kb.idx(C)), kb.idx(G));
  Value cnt = kb.sub(c1, c0);
  Phase1 p1{ctx, l, kb, expand, names, p, c0, cnt,
            l.shared(kXs), l.shared(kPhiS), l.shared(kWS), l.shared(kRed), l.shared(kMixS)};
  p1.zeroXs();
  if (p.dependent) {
    // Everything above is this block's own (shared memory, indices): it
    // overlaps the previous kernel's tail. Every global access is below.
    kb.waitGridDependency();
    kb.launchDependents();
  }
  Value tiles = kb.div(kb.add(M, kb.idx(p.tile - 1)), kb.idx(p.tile));
  kb.loop(kb.idx(0), tiles, kb.idx(1), [&](Value t) {
    Value m0 = kb.mul(t, kb.idx(p.tile));
    Value live = kb.min(kb.sub(M, m0), kb.idx(p.tile));
    p1.stage(m0, live);
    p1.partials(m0, live, bid);
  });
  // Thread k's alpha and beta (k < N; clamped), loaded before the barrier;
  // pre's (k < n) into abS for the decode path.
  std::pair<Value, Value> ab = loadScaleParams(kb, ctx.spec, l);
  Value abS = l.shared(kAbS);
  kb.when(kb.lt(tid, kb.idx(n)), [&] {
    kb.store(ab.first, abS, kb.mul(tid, kb.idx(2)));
    kb.store(ab.second, abS, kb.add(kb.mul(tid, kb.idx(2)), kb.idx(1)));
  });
  Value sync = l.arg(::mhc::kSyncParam);
  kb.gridBarrier(sync, G);
  // Decode (M <= tile): no second barrier. Every block finds pre itself;
  // the block's own tokens (m = bid + k G) scaled, their logits into red
  // (done with) at k n n; then warp 0 runs their Sinkhorns (lane k: token
  // bid + k G) while the other warps write y.
  Value decode = kb.lt(M, kb.idx(p.tile + 1));
  kb.when(decode, [&] {
    decodeSums(ctx, l, kb, p, l.shared(kFin2), l.shared(kFinOwn), l.shared(kPreS), abS);
    Value logitsS = l.shared(kRed);
    kb.loop(bid, M, kb.idx(G), [&](Value m) {
      Value k = kb.div(m, kb.idx(G));
      decodeFinish(ctx, l, kb, names, p, m, k, l.shared(kFin2), l.shared(kFinOwn),
                   l.shared(kRow), logitsS, kb.mul(k, kb.idx(n * n)), ab);
    });
    Value m = kb.add(bid, kb.mul(tid, kb.idx(G)));
    kb.when(kb.andi(kb.lt(tid, kb.idx(32)), kb.lt(m, M)), [&] {
      sinkhornToken(ctx, l, kb, names, m, logitsS, kb.mul(tid, kb.idx(n * n)));
    });
    writeYShared(ctx, l, kb, p1, l.shared(kPreS), /*firstThread=*/32);
  });
  kb.when(kb.lt(kb.idx(p.tile), M), [&] {
    kb.loop(bid, M, kb.idx(G), [&](Value m) {
      finishToken(ctx, l, kb, names, p, m, l.shared(kFin), l.shared(kRow), l.shared(kMix), ab);
    });
    kb.gridBarrier(sync, G);
    writeY(ctx, l, kb, p1, expand ? "x_next" : "x");
  });
  return success();
}

} // namespace

LogicalResult mlir::mhc::buildPreOneLaunch(KernelContext &ctx) {
  declareProjectForwardIO(ctx);
  declarePreTailIO(ctx);
  return buildOneLaunch(ctx, /*expand=*/false, {"x", "post", "P"});
}

LogicalResult mlir::mhc::buildPostPreOneLaunch(KernelContext &ctx) {
  Composition c(ctx); // declares the contract's buffers, in order
  seam::declareForwardContract(c, ctx);
  return buildOneLaunch(ctx, /*expand=*/true, {"x", "post_next", "P_next"});
}
