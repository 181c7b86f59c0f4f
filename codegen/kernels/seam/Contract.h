//===- Contract.h - the layer seam's buffers, in contract order -*- C++ -*-===//
//
// The seam's operands and results (docs/design/seam.md, "The contract"):
// the names, order, dtypes and extents every seam kernel declares, and the
// names its stages' buffers map onto.
//
//===----------------------------------------------------------------------===//

#ifndef MHC_CODEGEN_KERNELS_SEAM_CONTRACT_H
#define MHC_CODEGEN_KERNELS_SEAM_CONTRACT_H

#include "builder/Composition.h"

namespace mlir::mhc::seam {

/// post_pre.fwd: f, post, x, P, bias?, phi, alpha, beta, weight?; then
/// x_next, h, ms, pre, post_next, logits, P_next, y.
void declareForwardContract(Composition &c, const KernelContext &ctx);
/// post_pre.bwd: gx_next, gy, gpost_next, gP_next, f, post, x, P, bias?,
/// x_next, h, ms, pre, logits, phi, alpha, beta, weight?; then gx, gf,
/// gpost, gP, gbias?, gphi, galpha, gbeta, gweight?.
void declareBackwardContract(Composition &c, const KernelContext &ctx);
/// post_pre.bwd's parts in stage order: aggregate, sinkhorn, scale,
/// project, expand_combine (::mhc::postPreParts, checked).
std::vector<::mhc::KernelSpec> backwardParts(const KernelContext &ctx);

/// The seam's two composed launch sequences (ForwardComposed.cpp,
/// BackwardComposed.cpp): each part's own kernels, in order.
LogicalResult buildForwardComposed(KernelContext &ctx);
LogicalResult buildBackwardComposed(KernelContext &ctx);
/// The forward with x_next computed in the projection's partial launch
/// (ForwardFused.cpp), and the specs it serves.
bool forwardFuses(const KernelContext &ctx);
LogicalResult buildForwardFused(KernelContext &ctx);
/// The backward with aggregate's gx folded into the projection backward
/// (BackwardFused.cpp), and the specs it serves.
bool backwardFuses(const KernelContext &ctx);
LogicalResult buildBackwardFused(KernelContext &ctx);

} // namespace mlir::mhc::seam

#endif // MHC_CODEGEN_KERNELS_SEAM_CONTRACT_H
