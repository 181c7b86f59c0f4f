//===- Sinkhorn.cpp - doubly stochastic projection and gradient -----------===//
//
// One thread per token; the n x n matrix lives in registers (TokenMath.cpp).
// The forward (Forward.cpp) iterates in registers. The backward
// (Backward.cpp) is reverse mode through the T iterations: the forward is
// recomputed in the kernel and the per-iteration vectors it needs (log
// mode: the potentials f^t, g^t; softmax_eps mode: the row and column sums)
// are kept in shared memory, thread-minor so the accesses are conflict-free.
// softmax_eps steps are undone by multiplying back by (sum + eps)
// (BackwardSoftmaxEps.cpp). The log mode runs in base 2 (ex2/lg2
// instructions; see negLog2SumExp2), in the scaling form, and in the log
// domain (BackwardLogDomain.cpp) for the tokens whose sums leave its range.
//
//===----------------------------------------------------------------------===//

#include "kernels/Kernels.h"
#include "kernels/sinkhorn/Sinkhorn.h"

using namespace mlir;
using namespace mlir::mhc;

LogicalResult mlir::mhc::buildSinkhorn(KernelContext &ctx) {
  // One thread's scalar f32 chain: before sm_100 (no f32x2) the SLP
  // vectorizer finds nothing here (the PTX of every sm_80 and sm_90a spec,
  // n = 2 .. 8, both modes, is the same without it) and took 30% of the
  // n = 8 backward's cold JIT.
  ctx.llvmSLP = ctx.spec.arch.rfind("sm_100", 0) == 0;
  return ctx.spec.dir == ::mhc::Direction::Forward ? sinkhorn::buildForward(ctx)
                                                   : sinkhorn::buildBackward(ctx);
}
