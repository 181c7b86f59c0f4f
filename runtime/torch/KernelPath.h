//===- KernelPath.h - generated kernel or reference, and launch -*- C++ -*-===//
//
// On CUDA an op asks select() for its kernel; any reason not to use it
// (MHC_FORCE_REFERENCE, M = 0, a non-contiguous/misaligned/float64 input,
// unsupportedReason, a compile failure) sends the call to the ATen reference
// with a one-time warning. launch() runs the kernel on the current stream.
//
//===----------------------------------------------------------------------===//

#ifndef MHC_TORCH_KERNELPATH_H
#define MHC_TORCH_KERNELPATH_H

#include "Checks.h"

#include "mhc/Runtime/Runtime.h"

#include <initializer_list>
#include <utility>

namespace mhc::ops {

/// The loaded kernel for `spec`, or nullptr (after a one-time warning naming
/// the reason) when this call must take the reference path.
const mhc::rt::LoadedKernel *select(const char *op, mhc::KernelSpec spec,
                                    std::initializer_list<const Tensor *> inputs,
                                    int64_t M);

/// Launches `kernel` with the named tensors; an output named with a null
/// tensor is written to the workspace and dropped.
void launch(const mhc::rt::LoadedKernel &kernel, int64_t M,
            std::initializer_list<std::pair<const char *, const Tensor *>> named,
            const Tensor &like);

/// An uninitialised contiguous tensor of `sizes` (of `dtype`, else of
/// `like`'s) on `like`'s CUDA device, as at::empty gives, straight from at::detail::empty_cuda: no
/// dispatcher round trips (at::empty_like makes two), about a microsecond
/// less host time per output at small M. For the outputs of a kernel that
/// select() returned, which the kernel writes in full (so unlike at::empty
/// it skips torch.utils.deterministic.fill_uninitialized_memory's NaN fill).
Tensor emptyOf(at::IntArrayRef sizes, at::ScalarType dtype, const Tensor &like);
inline Tensor emptyOf(at::IntArrayRef sizes, const Tensor &like) {
  return emptyOf(sizes, like.scalar_type(), like);
}
/// emptyOf(like.sizes(), like): at::empty_like of a contiguous tensor.
inline Tensor emptyLike(const Tensor &like) { return emptyOf(like.sizes(), like); }

/// An optional input: undefined when absent (the kernel then has no such
/// buffer, and select() skips it).
inline Tensor orUndefined(const OptTensor &t) { return t ? *t : Tensor(); }

} // namespace mhc::ops

#endif // MHC_TORCH_KERNELPATH_H
