//===- Library.cpp - torch.ops.mhc.*: schemas and kernels -----------------===//
//
// Every mhc op and its gradient as a PyTorch operator, from its schema in
// OpHandles.h. CPU tensors run the ATen reference (Reference.cpp); CUDA
// tensors the generated kernels through the runtime (JIT-compiled on first
// use), or the reference after a one-time warning naming the reason
// (KernelPath.cpp). Autograd is registered in C++ (Autograd.cpp), the fake
// (meta) kernels in Python (python/mhc/_registry.py).
//
//===----------------------------------------------------------------------===//

#include "OpEntries.h"

#include <torch/library.h>

using namespace mhc::ops;

namespace {

/// Defines `op` with its CPU (reference) and CUDA entries.
template <typename Ref, typename Cuda>
void define(torch::Library &m, const OpSchema &op, Ref ref, Cuda cuda) {
  m.def(op.schema);
  const char *name = op.name + sizeof("mhc::") - 1;
  m.impl(name, torch::dispatch(c10::DispatchKey::CPU, ref));
  m.impl(name, torch::dispatch(c10::DispatchKey::CUDA, cuda));
}

} // namespace

TORCH_LIBRARY(mhc, m) {
  define(m, kProject, TORCH_FN(project_ref), TORCH_FN(project_cuda));
  define(m, kProjectBackward, TORCH_FN(project_backward_ref), TORCH_FN(project_backward_cuda));
  define(m, kScale, TORCH_FN(scale_ref), TORCH_FN(scale_cuda));
  define(m, kScaleBackward, TORCH_FN(scale_backward_ref), TORCH_FN(scale_backward_cuda));
  define(m, kSinkhorn, TORCH_FN(sinkhorn_ref), TORCH_FN(sinkhorn_cuda));
  define(m, kSinkhornBackward, TORCH_FN(sinkhorn_backward_ref), TORCH_FN(sinkhorn_backward_cuda));
  define(m, kAggregate, TORCH_FN(aggregate_ref), TORCH_FN(aggregate_cuda));
  define(m, kAggregateBackward, TORCH_FN(aggregate_backward_ref), TORCH_FN(aggregate_backward_cuda));
  define(m, kExpandCombine, TORCH_FN(expand_combine_ref), TORCH_FN(expand_combine_cuda));
  define(m, kExpandCombineBackward, TORCH_FN(expand_combine_backward_ref),
         TORCH_FN(expand_combine_backward_cuda));
  define(m, kPre, TORCH_FN(pre_ref), TORCH_FN(pre_cuda));
  define(m, kPreSaved, TORCH_FN(pre_saved_ref), TORCH_FN(pre_saved_cuda));
  define(m, kPreBackward, TORCH_FN(pre_backward_ref), TORCH_FN(pre_backward_cuda));
  // The layer seam (SeamOps.cpp).
  define(m, kPostPre, TORCH_FN(post_pre_ref), TORCH_FN(post_pre_cuda));
  define(m, kPostPreSaved, TORCH_FN(post_pre_saved_ref), TORCH_FN(post_pre_saved_cuda));
  define(m, kPostPreBackward, TORCH_FN(post_pre_backward_ref),
         TORCH_FN(post_pre_backward_cuda));
  // The inference ops (out=; InferenceOps.cpp has their Autograd entries).
  define(m, kPostPreOut, TORCH_FN(post_pre_out_ref), TORCH_FN(post_pre_out_cuda));
  define(m, kPreOut, TORCH_FN(pre_out_ref), TORCH_FN(pre_out_cuda));
  define(m, kExpandCombineOut, TORCH_FN(expand_combine_out_ref),
         TORCH_FN(expand_combine_out_cuda));
  // TE's f32 x-gradient buffer (mutable `buffer`; Autograd entries in
  // InferenceOps.cpp).
  define(m, kAggregateBackwardInto, TORCH_FN(aggregate_backward_into_ref),
         TORCH_FN(aggregate_backward_into_cuda));
  define(m, kExpandCombineBackwardInto, TORCH_FN(expand_combine_backward_into_ref),
         TORCH_FN(expand_combine_backward_into_cuda));
}
