//===- ForwardComposed.cpp - post_pre.fwd as expand_combine, then pre -----===//
//
// The seam's forward as its two parts' own kernels (docs/design/seam.md):
// expand_combine of layer l writes x_next, then the pre step of layer l+1
// reads it. Every n, layout, dtype and arch the parts support; the same code
// as the unfused ops, so the same bits.
//
//===----------------------------------------------------------------------===//

#include "kernels/Kernels.h"
#include "kernels/seam/Contract.h"

using namespace mlir;
using namespace mlir::mhc;

LogicalResult seam::buildForwardComposed(KernelContext &ctx) {
  std::vector<::mhc::KernelSpec> parts = ::mhc::postPreParts(ctx.spec);
  assert(parts.size() == 2 && parts[0].op == ::mhc::OpKind::ExpandCombine &&
         parts[1].op == ::mhc::OpKind::Pre);
  Composition c(ctx);
  declareForwardContract(c, ctx);
  if (failed(c.stage(parts[0], {"post", {{"out", "x_next"}}},
                     buildExpandCombine)))
    return failure();
  if (failed(c.stage(parts[1],
                     {"pre", {{"x", "x_next"}, {"post", "post_next"}, {"P", "P_next"}}},
                     buildPre)))
    return failure();
  return c.finish();
}
