//===- BackwardMmaFold.cpp - aggregate's gradient in the main pass -------===//
//
// The layer seam's main pass (docs/design/seam.md, "The fused backward"):
// the mma.sync backward forms aggregate's gx, acc + pre (x) gy, where it
// stores gx, for the (C, n) layout with whole channels per lane. The pre
// step's backward (pre.bwd) folds it the same way with no acc (aggregate's
// gx alone, rounded) or TE's f32 buffer as acc (the f32 sum, not rounded:
// aggregate_backward_into's bits).
//
//===----------------------------------------------------------------------===//

#include "kernels/project/BackwardMmaMain.h"
#include "kernels/project/Fragments.h"
#include "kernels/project/Project.h"

#include "builder/Streams.h"

using namespace mlir;
using namespace mlir::mhc;

/// acc becomes aggregate.bwd's gx (acc = its acc): own = pre[i] gy[c] at
/// column c n + i of the lane's laneCols / n whole channels, plusAcc, and
/// the store's rounding to the activation dtype, the instructions of
/// Aggregate.cpp, so the sum is bitwise the unfused chain's. Loaded after
/// the products (before them, their 12 values per lane held through the
/// mma loop spill the paced kernel's 128 registers).
void MmaMain::foldAggregateInto(StepValues &s) {
  Type elem = elementType(kb.b.getContext(), act);
  if (lateAcc())
    loadAcc(s);
  for (int u = 0; u < 2; ++u) {
    // Row M - 1 for rows past M, as acc; gy's offset is acc's over n (K = n C).
    Value row = kb.min(s.tok[u], lastRow);
    Value accAt = kb.add(kb.mul(row, kb.idx(p.K)), col0);
    SmallVector<Value> gy = loadRun(kb, l.arg("gy"), kb.div(accAt, kb.idx(n)), p.laneCols / n);
    SmallVector<Value> pre = loadRow(kb, l.arg("pre"), row, n);
    if (!hasAcc) // (no acc buffer: aggregate's gx is its own, rounded)
      s.acc[u].assign(p.laneCols, Value());
    for (int64_t j = 0; j < p.laneCols; ++j) {
      Value own = kb.mul(pre[j % n], gy[j / n]);
      Value g1 = hasAcc ? plusAcc(kb, spec, own, s.acc[u][j]) : own;
      // acc=f32: aggregate's gx is the buffer's f32 sum, not rounded.
      s.acc[u][j] = spec.accF32 ? g1 : kb.toF32(kb.toType(g1, elem));
    }
  }
}

bool mlir::mhc::projectBackwardFoldsAggregate(const KernelContext &ctx) {
  if (projectBackwardIsWide(ctx) || projectBackwardIsWgmma(ctx) ||
      ctx.spec.layout != ::mhc::Layout::CN)
    return false;
  // The folds' loads and stores are whole lanes' columns of 16-byte aligned
  // rows: not the any-K plan's masked pieces (K % 8 != 0).
  MmaPlan p = planMma(ctx);
  return p.laneCols % ctx.n() == 0 && p.xAlign == 16 && !p.wordCopy &&
         p.colPiece == p.laneCols;
}

LogicalResult mlir::mhc::buildProjectBackwardFoldAggregate(KernelContext &ctx) {
  assert(projectBackwardFoldsAggregate(ctx));
  return buildProjectBackwardMma(ctx, /*foldAggregate=*/true);
}
