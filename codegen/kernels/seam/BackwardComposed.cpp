//===- BackwardComposed.cpp - post_pre.bwd as its parts' gradients --------===//
//
// The seam's backward as the five backward ops' own kernels, in the
// contract's order (docs/design/seam.md):
//
//   gpre, g1    = aggregate_grad(gy, x_next, pre, acc = gx_next)
//   glogits     = sinkhorn_grad(gP_next, logits)
//   gh, gms, galpha, gbeta = scale_grad(gpre, gpost_next, glogits, h, ms, alpha, beta)
//   g, gphi, gweight       = project_grad(gh, gms, x_next, phi, weight, acc = g1)
//   gf, gpost, gx, gP, gbias = expand_combine_grad(g, f, post, x, P, bias)
//
// x_next's three gradient contributions are summed where aggregate's and
// project's kernels store them (`acc`), so nothing adds n-stream tensors.
// g1, gpre, glogits, gh, gms and g are workspaces.
//
//===----------------------------------------------------------------------===//

#include "kernels/Kernels.h"
#include "kernels/seam/Contract.h"

using namespace mlir;
using namespace mlir::mhc;

LogicalResult seam::buildBackwardComposed(KernelContext &ctx) {
  std::vector<::mhc::KernelSpec> parts = seam::backwardParts(ctx);
  Composition c(ctx);
  declareBackwardContract(c, ctx);
  // The `acc` renames fail the composition if a part's kernel does not take
  // the buffer (its builder without in-kernel accumulation).
  if (failed(c.stage(parts[0],
                     {"aggregate", {{"x", "x_next"}, {"acc", "gx_next"}, {"gx", "g1"}}},
                     buildAggregate)) ||
      failed(c.stage(parts[1], {"sinkhorn", {{"gP", "gP_next"}}}, buildSinkhorn)) ||
      failed(c.stage(parts[2], {"scale", {{"gpost", "gpost_next"}}}, buildScale)) ||
      failed(c.stage(parts[3],
                     {"project", {{"x", "x_next"}, {"acc", "g1"}, {"gx", "g"}}},
                     buildProject)) ||
      failed(c.stage(parts[4], {"post", {{"gout", "g"}}}, buildExpandCombine)))
    return failure();
  return c.finish();
}
