//===- Seam.cpp - the layer seam's kernels: which build ------------------===//
//
// post_pre (docs/design/seam.md): expand_combine of layer l, then the pre
// step of layer l+1, forward and backward. Both directions are compositions
// of the parts' own kernels (builder/Composition.h); the flagship's forward
// computes x_next in the projection's partial launch instead
// (ForwardFused.cpp), and its backward folds aggregate's gradient into the
// projection backward (BackwardFused.cpp).
//
//===----------------------------------------------------------------------===//

#include "kernels/Kernels.h"
#include "kernels/seam/Contract.h"

using namespace mlir;
using namespace mlir::mhc;

LogicalResult mlir::mhc::buildPostPre(KernelContext &ctx) {
  if (ctx.spec.dir == ::mhc::Direction::Forward)
    return seam::forwardFuses(ctx) ? seam::buildForwardFused(ctx)
                                   : seam::buildForwardComposed(ctx);
  return seam::backwardFuses(ctx) ? seam::buildBackwardFused(ctx)
                                  : seam::buildBackwardComposed(ctx);
}
