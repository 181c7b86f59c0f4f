//===- OpEntries.h - the functions behind torch.ops.mhc.* -------*- C++ -*-===//
//
// Each op's CPU entry (<op>_ref: checks, then the ATen reference) and CUDA
// entry (<op>_cuda: checks, then the generated kernel or the reference),
// declared with the op's signature from OpHandles.h; Library.cpp registers
// them. One file per op family defines them.
//
//===----------------------------------------------------------------------===//

#ifndef MHC_TORCH_OPENTRIES_H
#define MHC_TORCH_OPENTRIES_H

#include "Checks.h"
#include "KernelPath.h"
#include "OpHandles.h"
#include "Reference.h"
#include "Specs.h"

namespace mhc::ops {

ProjectSig project_ref, project_cuda;
ProjectBackwardSig project_backward_ref, project_backward_cuda;
ScaleSig scale_ref, scale_cuda;
ScaleBackwardSig scale_backward_ref, scale_backward_cuda;
SinkhornSig sinkhorn_ref, sinkhorn_cuda;
SinkhornBackwardSig sinkhorn_backward_ref, sinkhorn_backward_cuda;
AggregateSig aggregate_ref, aggregate_cuda;
AggregateBackwardSig aggregate_backward_ref, aggregate_backward_cuda;
ExpandCombineSig expand_combine_ref, expand_combine_cuda;
ExpandCombineBackwardSig expand_combine_backward_ref, expand_combine_backward_cuda;
PreSig pre_ref, pre_cuda;
PreSavedSig pre_saved_ref, pre_saved_cuda;
PreBackwardSig pre_backward_ref, pre_backward_cuda; // PreBackwardOps.cpp
// The layer seam (SeamOps.cpp).
PostPreSig post_pre_ref, post_pre_cuda;
PostPreSavedSig post_pre_saved_ref, post_pre_saved_cuda;
PostPreBackwardSig post_pre_backward_ref, post_pre_backward_cuda;
// The inference ops (out=): SeamOps.cpp, PreOps.cpp, ExpandCombineOps.cpp.
PostPreOutSig post_pre_out_ref, post_pre_out_cuda;
PreOutSig pre_out_ref, pre_out_cuda;
ExpandCombineOutSig expand_combine_out_ref, expand_combine_out_cuda;
// TE's f32 x-gradient buffer: AggregateOps.cpp, ExpandCombineOps.cpp.
AggregateBackwardIntoSig aggregate_backward_into_ref, aggregate_backward_into_cuda;
ExpandCombineBackwardIntoSig expand_combine_backward_into_ref, expand_combine_backward_into_cuda;

/// project's checks (layout, n, x, phi, weight) for `op`: project,
/// project_backward and pre, whose rules begin with project's.
Checker checkProject(const char *op, const Tensor &x, const Tensor &phi,
                     const OptTensor &weight, int64_t n, Str layout);

/// The pre step's outputs for a kernel to write (PreOps.cpp): y, post and P
/// always, h, ms, pre and logits only when `save` (else the kernel leaves
/// them in its workspace and they stay undefined).
struct PreStepOutputs {
  Tensor y, post, P, h, ms, pre, logits;
};
PreStepOutputs emptyPreStep(const Tensor &x, int64_t M, int64_t n, int64_t C,
                            bool save);

} // namespace mhc::ops

#endif // MHC_TORCH_OPENTRIES_H
