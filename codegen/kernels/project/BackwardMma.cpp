//===- BackwardMma.cpp - projection backward on mma.sync, every n ---------===//
//
// One fused pass over x on tensor cores. A block of four warps owns
// 4 x 16T columns of K and a fixed share of the tokens; a warp walks its
// share 8 tokens at a time and computes, per 16-column k-tile,
//   D^T = phi^T gh^T   (16 k x 8 tokens; contraction over N), and
//   gphi^T += x^T gh   (16 k x 8 rows of N; contraction over the 8 tokens).
// D^T's accumulator layout (lane (g, t): rows g, g + 8, tokens 2t, 2t + 1)
// is exactly the A-fragment layout of x^T once the step's tokens are
// permuted (logical t, t + 4 -> physical 2t, 2t + 1), so each lane loads x
// once, as 2T contiguous columns per token (rows g and g + 8 of tile kt are
// columns 2kt and 2kt + 1 of the lane's run), and uses the same values for
// gx = D w + (2/K) gms x, gw += x D and gphi's mma. phi^T's fragments are
// constant and wait in lane-private shared memory. x and gh arrive through
// a ring of stages in shared memory, several steps ahead: for 2-byte x on
// sm_90 a block ring filled by bulk copies (one thread, mbarriers; on sm_90a
// without a weight a producer warp's, which holds the blocks of a wave
// together), else a ring per warp filled by cp.async; the block ring spares
// the L2 every warp asking for the same gh rows (docs/design/project.md).
// Without the tf32 flag, gh and phi are split into tf32 hi + lo parts
// (3xTF32) and gphi's mma accumulators are flushed into fp32 totals every
// 64 tokens. Per-share partials [shares, N*K + K] are summed in order by a
// second launch: deterministic, no atomics.
//
// The layer seam's main pass (foldAggregate: docs/design/seam.md, "The
// fused backward") also folds aggregate's gradient into acc: before it
// stores gx the lane loads gy at its channels and pre at its tokens and
// forms aggregate's gx, acc + pre (x) gy rounded as aggregate.bwd stores
// it, which the unfused chain reads back as acc; (C, n) layout with whole
// channels per lane (BackwardMmaFold.cpp). The class is declared in
// BackwardMmaMain.h; x's rows at K % 8 != 0 are BackwardMmaAnyK.cpp's, the
// rings' copies BackwardMmaCopies.cpp's, a step's products and gx
// BackwardMmaStep.cpp's. This file: the launch's values, the share's sums
// and partials, the launches.
//
//===----------------------------------------------------------------------===//

#include "builder/WavePacer.h"
#include "builder/Streams.h"
#include "kernels/project/BackwardMmaMain.h"
#include "kernels/project/BackwardMmaPlan.h"
#include "kernels/project/Project.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "llvm/Support/SaveAndRestore.h"

using namespace mlir;
using namespace mlir::mhc;
using ::mhc::BufferRole;
using ::mhc::DType;

MmaMain::MmaMain(KernelContext &ctx, const MmaPlan &p, LaunchBuilder &l,
                 bool foldAggregate)
    : p(p), l(l), kb(ctx.begin(l)), act(ctx.spec.act), spec(ctx.spec),
      hasAcc(ctx.spec.readsAcc()), foldAgg(foldAggregate), n(ctx.n()) {
  const int64_t N = p.N, K = p.K;
  M = l.tokens();
  tid = kb.threadId(), bid = kb.blockId();
  lane = kb.rem(tid, kb.idx(32)), warp = kb.div(tid, kb.idx(32));
  g = kb.div(lane, kb.idx(4)), t = kb.rem(lane, kb.idx(4));
  slice = kb.rem(bid, kb.idx(p.slices)), share = kb.div(bid, kb.idx(p.slices));
  // This lane's run of 2T physical columns; logical row g + 8h of k-tile
  // kt is column colBase + 2kt + h.
  colBase = kb.add(kb.mul(slice, kb.idx(p.blockCols)),
                   kb.add(kb.mul(warp, kb.idx(16 * p.T)),
                          kb.mul(g, kb.idx(p.laneCols))));
  active = kb.lt(colBase, kb.idx(K));
  col0 = kb.select(active, colBase, kb.idx(0));
  zero = kb.f32(0.0);
  smem = l.shared(0), ring = l.shared(1);
  twoOverK = kb.f32(2.0 / static_cast<double>(K));

  // This share's steps of 8 tokens.
  Value steps = kb.div(kb.add(M, kb.idx(7)), kb.idx(8));
  per = kb.div(kb.add(steps, kb.idx(p.shares - 1)), kb.idx(p.shares));
  sBegin = kb.min(kb.mul(share, per), steps);
  sEnd = kb.min(kb.add(sBegin, per), steps);
  lastRow = kb.sub(M, kb.idx(1));

  zeroAcc = arith::ConstantOp::create(
      kb.b, kb.loc,
      DenseElementsAttr::get(VectorType::get({2, 2}, kb.b.getF32Type()), 0.0f));
  init.assign(p.nAcc(), zeroAcc);
  init.append(p.laneCols, zero);

  warpRing = kb.mul(warp, kb.idx(p.depth * p.stageFloats));
  ghEnd = kb.mul(M, kb.idx(N));
  xLane = kb.add(kb.mul(kb.mul(t, kb.idx(2)), kb.idx(K)), col0);
  xBytes = K % p.blockCols == 0 ? Value()
                                : kb.select(active, kb.i32(p.unit), kb.i32(0));
  actVec = VectorType::get({p.unit / p.actBytes},
                           elementType(kb.b.getContext(), ctx.spec.act));
  if (p.staged)
    bulk.emplace(kb, l.shared(2), p.depth, p.warps, /*everyLane=*/true);
  count = kb.sub(sEnd, sBegin);
  // Bytes of this block's slice of a row (the last slice may be narrower).
  sliceCol = kb.mul(slice, kb.idx(p.blockCols));
  xRowBytes = kb.mul(kb.min(kb.sub(kb.idx(K), sliceCol), kb.idx(p.blockCols)),
                     kb.idx(p.actBytes));
  // This lane's x columns within the block's slice.
  laneColInBlock = kb.sub(colBase, sliceCol);
  if (p.rowWords)
    rowWordCol = kb.add(sliceCol, kb.add(kb.mul(warp, kb.idx(16 * p.T)), kb.mul(lane, kb.idx(2))));
  limitRowAccesses(ctx, kb, l, {"x", "phi", "weight", "acc", "gx", "partials"});
}

/// The share's sums over its steps. Precise mode sums in two levels: runs
/// of kRun steps, then the runs; gphi's mma accumulators restart every run
/// and are added into fp32 totals, so the tensor core's truncating
/// accumulation never spans more than 64 tokens. With tf32 (bound 2e-3)
/// one level is enough.
SmallVector<Value> MmaMain::shareSums() {
  if (!p.precise)
    return stepRange(sBegin, sEnd, init);
  int64_t nSums = p.nAcc() + p.laneCols;
  return kb.loop(
      sBegin, sEnd, kb.idx(kRun), init, [&](Value s0, ValueRange outer) {
        SmallVector<Value> start(init.begin(), init.end());
        SmallVector<Value> sums =
            stepRange(s0, kb.min(kb.add(s0, kb.idx(kRun)), sEnd), start);
        for (int64_t i = 0; i < nSums; ++i)
          sums[i] = kb.add(outer[i], sums[i]);
        return sums;
      });
}

/// With masked columns (K % laneCols != 0) a block whose slice lies inside
/// K runs the step loop without the masks (every lane active, whole
/// pieces), the last slice with them: the loop most blocks run keeps the
/// aligned loop's branches (docs/design/project.md, "One loop per slice
/// kind").
SmallVector<Value> MmaMain::shareSumsBySlice() {
  Value inside = kb.lt(kb.add(sliceCol, kb.idx(p.blockCols - 1)), kb.idx(p.K));
  return kb.ifElse(
      inside,
      [&] {
        llvm::SaveAndRestore unmasked(wholeSlice, true);
        llvm::SaveAndRestore allActive(active, kb.boolean(true));
        llvm::SaveAndRestore ownColumns(col0, colBase);
        return shareSums();
      },
      [&] { return shareSums(); });
}

/// The share's partials: gphi (times the weight) and gw, whose four lanes
/// of a column group hold different tokens.
void MmaMain::storeShare(ArrayRef<Value> total) {
  const int64_t N = p.N, K = p.K, rSteps = p.rSteps, nAcc = p.nAcc();
  SmallVector<Value> gw;
  for (int64_t j = 0; j < p.laneCols; ++j) {
    Value v = total[nAcc + j];
    for (int offset : {1, 2}) {
      auto sh = gpu::ShuffleOp::create(kb.b, kb.loc, v, offset, 32,
                                       gpu::ShuffleMode::XOR);
      v = kb.add(v, sh.getShuffleResult());
    }
    gw.push_back(v);
  }
  kb.when(active, [&] {
    Value base = kb.mul(share, kb.idx(p.width));
    // gphi[8rs + 2t + e][colBase + 2kt + h] = acc[kt][rs][h][e] * w.
    for (int64_t rs = 0; rs < rSteps; ++rs)
      for (int64_t e = 0; e < 2; ++e) {
        Value r = kb.add(kb.idx(8 * rs + e), kb.mul(t, kb.idx(2)));
        SmallVector<Value> vals;
        for (int64_t j = 0; j < p.laneCols; ++j)
          vals.push_back(kb.mul(
              w[j], vector::ExtractOp::create(
                        kb.b, kb.loc, total[(j / 2) * rSteps + rs],
                        ArrayRef<int64_t>{j % 2, e})));
        kb.when(kb.lt(r, kb.idx(N)), [&] {
          storeLaneCols(vals, l.arg("partials"), [&](Value c) {
            return kb.add(base, kb.add(kb.mul(r, kb.idx(K)), c));
          });
        });
      }
    if (p.hasW)
      kb.when(kb.eq(t, kb.idx(0)), [&] {
        storeLaneCols(gw, l.arg("partials"), [&](Value c) {
          return kb.add(base, kb.add(kb.idx(N * K), c));
        });
      });
  });
}

/// The consumers: every warp but the producer's.
void MmaMain::consume() {
  parkPhi();
  w.assign(p.laneCols, kb.f32(1.0));
  if (p.hasW)
    w = loadLaneCols(l.arg("weight"), [](Value c) { return c; });
  startCopies();
  SmallVector<Value> total = loopPerSlice() ? shareSumsBySlice() : shareSums();
  // Groups of steps past the share's end were empty.
  if (!p.staged)
    kb.copyAsyncWait(0);
  storeShare(total);
}

void MmaMain::emit() {
  if (!p.paced) {
    consume();
    return;
  }
  bulk->init();
  produce();
  kb.when(kb.lt(warp, kb.idx(p.warps)), [&] { consume(); });
}

namespace {

/// Launch "zero" of paced specs: the producers' counters, skipped below
/// paceTokens (one launch fewer for a small call; the counters are then
/// left alone).
void buildZeroLaunch(KernelContext &ctx, const MmaPlan &p) {
  ctx.buffer("progress", DType::F32, BufferRole::Workspace, {0, p.waves});
  LaunchBuilder &l = ctx.launch("zero");
  ::mhc::GridRule grid{0, 1};
  grid.minTokens = p.paceTokens;
  l.param("progress").block(32).grid(grid);
  KernelBuilder kb = ctx.begin(l);
  WavePacer::clear(kb, l.arg("progress"), p.waves, 32);
}

void buildMainLaunch(KernelContext &ctx, const MmaPlan &p, bool foldAggregate) {
  LaunchBuilder &l = ctx.launch("main");
  l.param("gh").param("gms").param("x").param("phi");
  if (p.hasW)
    l.param("weight");
  if (ctx.spec.readsAcc())
    l.param("acc");
  if (foldAggregate)
    l.param("gy").param("pre");
  l.param("gx").param("partials");
  if (p.paced)
    l.param("progress");
  l.param("M").block(p.threads)
      .grid({0, p.slices * p.shares})
      .sharedF32(p.phiFloats)
      .sharedF32((p.staged ? 1 : p.warps) * p.depth * p.stageFloats, /*align=*/128)
      .minBlocksPerSM(p.blocksPerSM);
  if (p.staged) // the mbarriers (and the paced producer's flag)
    l.sharedI64(2 * p.depth + (p.paced ? 1 : 0));
  MmaMain(ctx, p, l, foldAggregate).emit();
}

} // namespace

LogicalResult mlir::mhc::buildProjectBackwardMma(KernelContext &ctx,
                                                 bool foldAggregate) {
  const MmaPlan p = planMma(ctx);
  declareProjectBackwardIO(ctx);
  if (foldAggregate) {
    ctx.buffer("gy", ctx.spec.act, BufferRole::Input, {ctx.C(), 0});
    ctx.buffer("pre", DType::F32, BufferRole::Input, {ctx.n(), 0});
  }
  ctx.buffer("partials", DType::F32, BufferRole::Workspace, {0, p.shares * p.width});
  if (p.paced)
    buildZeroLaunch(ctx, p);
  buildMainLaunch(ctx, p, foldAggregate);
  SmallVector<std::pair<std::string, int64_t>> dsts = {{"gphi", p.N * p.K}};
  if (p.hasW)
    dsts.push_back({"gweight", p.K});
  emitColumnSumFinal(ctx, "partials", p.width, dsts, p.shares);
  return success();
}
