//===- Specs.h - the kernel spec of each torch op call ----------*- C++ -*-===//
//
// Every spec field an op call sets, from its tensors and attributes: the
// fields of one op family are filled here once, and the fused pre step's
// spec is its parts' fields together.
//
//===----------------------------------------------------------------------===//

#ifndef MHC_TORCH_SPECS_H
#define MHC_TORCH_SPECS_H

#include "Checks.h"

#include "mhc/Support/KernelSpec.h"

namespace mhc::ops {

/// The kernel dtype of `t` (f32 for one codegen has no kernel for, which
/// select() then sends to the reference).
std::optional<mhc::DType> dtypeOf(const Tensor &t);

mhc::KernelSpec projectSpec(mhc::Direction dir, int64_t n, const Tensor &x,
                            Str layout, int64_t C, const Tensor &phi,
                            const OptTensor &weight, bool tf32);
mhc::KernelSpec scaleSpec(mhc::Direction dir, int64_t n, const Tensor &beta,
                          double normEps, double preEps, double postMult);
mhc::KernelSpec sinkhornSpec(mhc::Direction dir, int64_t n, Str mode,
                             int64_t iters, double eps);
mhc::KernelSpec aggregateSpec(mhc::Direction dir, int64_t n, const Tensor &x,
                              Str layout, int64_t C);
mhc::KernelSpec combineSpec(mhc::Direction dir, int64_t n, const Tensor &x,
                            Str layout, int64_t C, const OptTensor &bias);
/// A backward spec of aggregate, project or expand_combine with acc set when
/// the call passes `acc` (x's gradient from its other users).
/// An f32 acc with 2-byte activations is TE's f32 buffer: acc=f32.
mhc::KernelSpec withAcc(mhc::KernelSpec spec, const OptTensor &acc);
/// The spec of a *_backward_into op (TE's f32 buffer): acc=f32 for 2-byte
/// activations; for f32 ones acc=1 (but expand_combine's, which reads none).
mhc::KernelSpec withBuffer(mhc::KernelSpec spec);
/// The fused pre step's: project's fields (one param dtype, phi's), then
/// scale's and sinkhorn's attributes.
mhc::KernelSpec preSpec(int64_t n, const Tensor &x, Str layout, int64_t C,
                        const Tensor &phi, const OptTensor &weight, bool tf32,
                        double normEps, double preEps, double postMult,
                        Str mode, int64_t iters, double eps);

/// A pre.fwd or post_pre.fwd spec for M tokens: the one-launch kernel
/// (`cooperative`) where mhc::forwardRunsInOneLaunch(M) says so, the rule
/// mhc-specialize follows too (MHC_ONE_LAUNCH_MAX_TOKENS, a benchmark knob,
/// moves the runtime's threshold). Other specs are returned as they are.
mhc::KernelSpec forTokens(mhc::KernelSpec spec, int64_t M);

/// The pre step's attributes, as pre and post_pre take them (views of the
/// call's arguments: valid for the call).
struct PreAttrs {
  int64_t n;
  Str layout;
  bool tf32;
  double normEps, preEps, postMult;
  Str mode;
  int64_t iters;
  double eps;
};

/// The layer seam's (post_pre.fwd / .bwd): the pre step's fields (one param
/// dtype, phi's) and expand_combine's bias.
mhc::KernelSpec postPreSpec(mhc::Direction dir, const PreAttrs &a,
                            const Tensor &x, int64_t C, const Tensor &phi,
                            const OptTensor &weight, const OptTensor &bias);

} // namespace mhc::ops

#endif // MHC_TORCH_SPECS_H
