//===- BackwardFused.cpp - post_pre.bwd with aggregate's gx folded --------===//
//
// The seam's backward with fewer passes over the n-stream than its parts
// (docs/design/seam.md, "The fused backward"). Step 1: the token pass is
// aggregate.bwd without gx (gy, x_next -> gpre), and the projection
// backward's main launch forms aggregate's gx (gx_next + pre (x) gy) in
// the registers where it adds its acc, so g1 is neither written nor read
// back; every result is bitwise the composition's. Sinkhorn's, scale's
// and expand_combine's gradients stay their own kernels (folding the
// latter in too measured slower: seam.md, "step 2").
//
//===----------------------------------------------------------------------===//

#include "kernels/Kernels.h"
#include "kernels/project/Project.h"
#include "kernels/seam/Contract.h"

using namespace mlir;
using namespace mlir::mhc;

bool seam::backwardFuses(const KernelContext &ctx) {
  // The flagship, as the fused forward (ForwardFused.cpp): n = 4, bf16
  // activations, f32 parameters, sm_90a, layout (C, n), on the mma.sync
  // projection backward whose lanes hold whole channels.
  return ::mhc::foldsAggregateGrad(ctx.spec) && projectBackwardFoldsAggregate(ctx);
}

LogicalResult seam::buildBackwardFused(KernelContext &ctx) {
  std::vector<::mhc::KernelSpec> parts = seam::backwardParts(ctx);
  Composition c(ctx);
  declareBackwardContract(c, ctx);
  // gpre is a workspace (aggregate writes it, scale reads it); the
  // project stage reads gx_next as its acc and gy, pre by their names.
  if (failed(c.stage(parts[0], {"aggregate", {{"x", "x_next"}}},
                     buildAggregateGradPre)) ||
      failed(c.stage(parts[1], {"sinkhorn", {{"gP", "gP_next"}}}, buildSinkhorn)) ||
      failed(c.stage(parts[2], {"scale", {{"gpost", "gpost_next"}}}, buildScale)))
    return failure();
  if (failed(c.stage(parts[3],
                     {"project", {{"x", "x_next"}, {"acc", "gx_next"}, {"gx", "g"}}},
                     buildProjectBackwardFoldAggregate)) ||
      failed(c.stage(parts[4], {"post", {{"gout", "g"}}}, buildExpandCombine)))
    return failure();
  return c.finish();
}
