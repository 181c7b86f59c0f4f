//===- ForwardFused.cpp - post_pre.fwd with expand + partials -------------===//
//
// The seam's forward with x_next computed inside the projection's partial
// launch (docs/design/seam.md, "The fused forward"): stage "expand" is the
// staged pack and partial launches reading layer l's x, f, post, P (+ bias)
// and writing x_next where the unfused partial would have read it; stage
// "pre" is the pre step's tail on those partials. Three launches instead of
// four, one read of x_next less; the K chunking is the unfused partial's,
// so every result is bitwise the composition's.
//
//===----------------------------------------------------------------------===//

#include "kernels/Kernels.h"
#include "kernels/project/Project.h"
#include "kernels/seam/Contract.h"

using namespace mlir;
using namespace mlir::mhc;

bool seam::forwardFuses(const KernelContext &ctx) {
  const ::mhc::KernelSpec &s = ctx.spec;
  // The flagship, where the fused partial was planned and will be measured:
  // n = 4, bf16 activations, f32 parameters, sm_90a, layout (C, n).
  return s.n == 4 && s.act == ::mhc::DType::BF16 &&
         s.param == ::mhc::DType::F32 && s.arch == "sm_90a" &&
         s.layout == ::mhc::Layout::CN && projectForwardExpands(ctx);
}

LogicalResult seam::buildForwardFused(KernelContext &ctx) {
  std::vector<::mhc::KernelSpec> parts = ::mhc::postPreParts(ctx.spec);
  const ::mhc::KernelSpec &pre = parts[1];
  assert(pre.op == ::mhc::OpKind::Pre);
  Composition c(ctx);
  declareForwardContract(c, ctx);
  if (failed(c.stage(pre, {"expand", {}}, buildProjectForwardExpand)) ||
      failed(c.stage(pre,
                     {"pre",
                      {{"partials", "expand_partials"},
                       {"x", "x_next"},
                       {"post", "post_next"},
                       {"P", "P_next"}}},
                     buildPreTail)))
    return failure();
  return c.finish();
}
