//===- Project.cpp - h = (x w) phi^T, ms = mean(x^2), gradient ------------===//
//
// The projection is a skinny GEMM, [M, K] x [K, N] with K = n*C large and
// N = 2n + n^2 small, fused with the sum of squares. It reads xvec in memory
// order, so one kernel serves both layouts (phi's columns follow xvec).
//
// Forward: Forward.cpp and its variants.
//
// Backward: Backward.cpp picks a variant; BackwardMma.cpp is the one for
// every n.
//
//===----------------------------------------------------------------------===//

#include "kernels/Kernels.h"
#include "kernels/project/Project.h"

using namespace mlir;
using namespace mlir::mhc;

LogicalResult mlir::mhc::buildProject(KernelContext &ctx) {
  return ctx.spec.dir == ::mhc::Direction::Forward ? buildProjectForward(ctx)
                                                   : buildProjectBackward(ctx);
}
