//===- OpHandles.h - typed dispatcher handles of torch.ops.mhc.* -----------===//
//
// Each op's schema, its C++ signature and its handle, looked up once: the
// registration (Library.cpp), the entries (OpEntries.h), the autograd
// wrappers (Autograd.cpp) and mhc._C's eager entry points (Module.cpp) read
// them here.
//
//===----------------------------------------------------------------------===//

#ifndef MHC_RUNTIME_TORCH_OPHANDLES_H
#define MHC_RUNTIME_TORCH_OPHANDLES_H

#include <ATen/core/dispatch/Dispatcher.h>

#include "mhc/Support/KernelLimits.h"

namespace mhc::ops {

using at::Tensor;
using OptTensor = std::optional<Tensor>;
using Str = c10::string_view;

/// The range of n the ops accept is the dialect's: 1..kMaxStreams.
using ::mhc::kMaxStreams;

using ProjectSig = std::tuple<Tensor, Tensor>(const Tensor &, const Tensor &,
                                              const OptTensor &, int64_t, Str, bool);
using ScaleSig = std::tuple<Tensor, Tensor, Tensor>(const Tensor &, const Tensor &,
                                                    const Tensor &, const Tensor &,
                                                    int64_t, double, double, double);
using SinkhornSig = Tensor(const Tensor &, int64_t, Str, int64_t, double);
using AggregateSig = Tensor(const Tensor &, const Tensor &, int64_t, Str);
using ExpandCombineSig = Tensor(const Tensor &, const Tensor &, const Tensor &,
                                const Tensor &, const OptTensor &, int64_t, Str);
using ProjectBackwardSig = std::tuple<Tensor, Tensor, Tensor>(
    const Tensor &, const Tensor &, const Tensor &, const Tensor &,
    const OptTensor &, int64_t, Str, bool, const OptTensor &);
using ScaleBackwardSig = std::tuple<Tensor, Tensor, Tensor, Tensor>(
    const Tensor &, const Tensor &, const Tensor &, const Tensor &,
    const Tensor &, const Tensor &, const Tensor &, int64_t, double, double,
    double);
using SinkhornBackwardSig = Tensor(const Tensor &, const Tensor &, int64_t, Str,
                                   int64_t, double);
using AggregateBackwardSig = std::tuple<Tensor, Tensor>(
    const Tensor &, const Tensor &, const Tensor &, int64_t, Str,
    const OptTensor &);
using ExpandCombineBackwardSig =
    std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor>(
        const Tensor &, const Tensor &, const Tensor &, const Tensor &,
        const Tensor &, const OptTensor &, int64_t, Str, const OptTensor &);
template <typename Out>
using PreSigOf = Out(const Tensor &, const Tensor &, const Tensor &,
                     const Tensor &, const OptTensor &, int64_t, Str, bool,
                     double, double, double, Str, int64_t, double);
using PreSig = PreSigOf<std::tuple<Tensor, Tensor, Tensor>>;
using PreSavedSig = PreSigOf<
    std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor>>;

// The layer seam (docs/design/seam.md, "The contract"): expand_combine of
// layer l, then the pre step of layer l+1; its attributes are mhc::pre's.
template <typename Out>
using PostPreSigOf = Out(const Tensor &, const Tensor &, const Tensor &,
                         const Tensor &, const OptTensor &, const Tensor &,
                         const Tensor &, const Tensor &, const OptTensor &,
                         int64_t, Str, bool, double, double, double, Str,
                         int64_t, double);
using PostPreSig = PostPreSigOf<std::tuple<Tensor, Tensor, Tensor, Tensor>>;
using PostPreSavedSig = PostPreSigOf<std::tuple<Tensor, Tensor, Tensor, Tensor,
                                                Tensor, Tensor, Tensor, Tensor>>;
// The inference ops (InferenceOps.cpp): the same computations into
// preallocated outputs (out=, last), for CUDA graphs with static addresses.
using PostPreOutSig =
    void(const Tensor &, const Tensor &, const Tensor &, const Tensor &,
         const OptTensor &, const Tensor &, const Tensor &, const Tensor &,
         const OptTensor &, int64_t, Str, bool, double, double, double, Str,
         int64_t, double, const Tensor &, const Tensor &, const Tensor &,
         const Tensor &);
using PreOutSig = void(const Tensor &, const Tensor &, const Tensor &,
                       const Tensor &, const OptTensor &, int64_t, Str, bool,
                       double, double, double, Str, int64_t, double,
                       const Tensor &, const Tensor &, const Tensor &);
using ExpandCombineOutSig = void(const Tensor &, const Tensor &, const Tensor &,
                                 const Tensor &, const OptTensor &, int64_t, Str,
                                 const Tensor &);
// TE's f32 x-gradient buffer (mhc.te's fused_grad_x_acc_buffer): the
// backward writes x's gradient into `buffer` (gpre / gf, gpost, gP, gbias
// returned).
using AggregateBackwardIntoSig = Tensor(const Tensor &, const Tensor &, const Tensor &,
                                        int64_t, Str, const Tensor &);
using ExpandCombineBackwardIntoSig = std::tuple<Tensor, Tensor, Tensor, Tensor>(
    const Tensor &, const Tensor &, const Tensor &, const Tensor &, const Tensor &,
    const OptTensor &, int64_t, Str, const Tensor &);
// The pre step's gradient (PreBackwardOps.cpp): (gx, gphi, galpha, gbeta,
// gweight) of gy, gpost, gP, x, h, ms, pre, logits, phi, alpha, beta,
// weight?, acc? and pre's attributes.
using PreBackwardSig = std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor>(
    const Tensor &, const Tensor &, const Tensor &, const Tensor &,
    const Tensor &, const Tensor &, const Tensor &, const Tensor &,
    const Tensor &, const Tensor &, const Tensor &, const OptTensor &,
    const OptTensor &, int64_t, Str, bool, double, double, double, Str,
    int64_t, double);
using PostPreBackwardSig =
    std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor,
               Tensor>(const Tensor &, const Tensor &, const Tensor &,
                       const Tensor &, const Tensor &, const Tensor &,
                       const Tensor &, const Tensor &, const OptTensor &,
                       const Tensor &, const Tensor &, const Tensor &,
                       const Tensor &, const Tensor &, const Tensor &,
                       const Tensor &, const Tensor &, const OptTensor &,
                       int64_t, Str, bool, double, double, double, Str, int64_t,
                       double);

/// One op's name and schema; Library.cpp defines it from these, and its
/// handle below is typed with the signature above (both checked against the
/// schema by PyTorch: the entries at registration, the handle on lookup).
struct OpSchema {
  const char *name;      // "mhc::<op>"
  const char *schema;
};

// The backward ops of aggregate, project and expand_combine end in an
// optional `acc` (x's shape and dtype): their gx is acc plus their own
// gradient of x, summed where gx is stored (docs/MATH.md, "Backward").
inline constexpr OpSchema kProject{"mhc::project",
    "project(Tensor x, Tensor phi, Tensor? weight, int n, str layout, bool tf32) -> (Tensor, Tensor)"};
inline constexpr OpSchema kProjectBackward{"mhc::project_backward",
    "project_backward(Tensor gh, Tensor gms, Tensor x, Tensor phi, Tensor? weight, int n, str layout, "
    "bool tf32, Tensor? acc=None) -> (Tensor, Tensor, Tensor)"};
inline constexpr OpSchema kScale{"mhc::scale",
    "scale(Tensor h, Tensor ms, Tensor alpha, Tensor beta, int n, float norm_eps, float pre_eps, "
    "float post_mult) -> (Tensor, Tensor, Tensor)"};
inline constexpr OpSchema kScaleBackward{"mhc::scale_backward",
    "scale_backward(Tensor gpre, Tensor gpost, Tensor glogits, Tensor h, Tensor ms, Tensor alpha, "
    "Tensor beta, int n, float norm_eps, float pre_eps, float post_mult) -> (Tensor, Tensor, Tensor, Tensor)"};
inline constexpr OpSchema kSinkhorn{"mhc::sinkhorn",
    "sinkhorn(Tensor logits, int n, str mode, int iters, float eps) -> Tensor"};
inline constexpr OpSchema kSinkhornBackward{"mhc::sinkhorn_backward",
    "sinkhorn_backward(Tensor gP, Tensor logits, int n, str mode, int iters, float eps) -> Tensor"};
inline constexpr OpSchema kAggregate{"mhc::aggregate",
    "aggregate(Tensor x, Tensor pre, int n, str layout) -> Tensor"};
inline constexpr OpSchema kAggregateBackward{"mhc::aggregate_backward",
    "aggregate_backward(Tensor gy, Tensor x, Tensor pre, int n, str layout, Tensor? acc=None) -> "
    "(Tensor, Tensor)"};
inline constexpr OpSchema kExpandCombine{"mhc::expand_combine",
    "expand_combine(Tensor f, Tensor post, Tensor x, Tensor P, Tensor? bias, int n, str layout) -> Tensor"};
inline constexpr OpSchema kExpandCombineBackward{"mhc::expand_combine_backward",
    "expand_combine_backward(Tensor gout, Tensor f, Tensor post, Tensor x, Tensor P, Tensor? bias, int n, "
    "str layout, Tensor? acc=None) -> (Tensor, Tensor, Tensor, Tensor, Tensor)"};
// One layer's pre step (project -> scale -> sinkhorn -> aggregate): one
// call and, on CUDA, one fused kernel. pre_saved also returns what the
// gradient needs (h, ms, pre, logits); autograd calls it (Autograd.cpp).
inline constexpr OpSchema kPre{"mhc::pre",
    "pre(Tensor x, Tensor phi, Tensor alpha, Tensor beta, Tensor? weight, int n, str layout, bool tf32, "
    "float norm_eps, float pre_eps, float post_mult, str mode, int iters, float eps) -> (Tensor, Tensor, Tensor)"};
inline constexpr OpSchema kPreSaved{"mhc::pre_saved",
    "pre_saved(Tensor x, Tensor phi, Tensor alpha, Tensor beta, Tensor? weight, int n, str layout, bool tf32, "
    "float norm_eps, float pre_eps, float post_mult, str mode, int iters, float eps) -> "
    "(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)"};
// pre_backward: the pre step's gradient from what pre_saved kept, with
// an empty gweight where weight is absent. acc is x's gradient from its
// other users (x's dtype), or TE's f32 buffer (2-byte x), read, not written:
// gx = acc + aggregate's + project's (docs/MATH.md, "acc", "acc=f32").
inline constexpr OpSchema kPreBackward{"mhc::pre_backward",
    "pre_backward(Tensor gy, Tensor gpost, Tensor gP, Tensor x, Tensor h, Tensor ms, Tensor pre, "
    "Tensor logits, Tensor phi, Tensor alpha, Tensor beta, Tensor? weight, Tensor? acc, int n, str layout, "
    "bool tf32, float norm_eps, float pre_eps, float post_mult, str mode, int iters, float eps) -> "
    "(Tensor, Tensor, Tensor, Tensor, Tensor)"};

// The layer seam (docs/design/seam.md): post_pre returns (x_next, y,
// post_next, P_next); post_pre_saved all eight results of the contract
// (autograd calls it, AutogradSeam.cpp); post_pre_backward the gradient,
// with an empty gbias / gweight where bias / weight is absent.
#define MHC_SEAM_INPUTS                                                        \
  "Tensor f, Tensor post, Tensor x, Tensor P, Tensor? bias, Tensor phi, Tensor alpha, Tensor beta, " \
  "Tensor? weight, "
#define MHC_PRE_ATTRS                                                          \
  "int n, str layout, bool tf32, float norm_eps, float pre_eps, float post_mult, str mode, int iters, " \
  "float eps"
inline constexpr OpSchema kPostPre{"mhc::post_pre",
    "post_pre(" MHC_SEAM_INPUTS MHC_PRE_ATTRS ") -> (Tensor, Tensor, Tensor, Tensor)"};
inline constexpr OpSchema kPostPreSaved{"mhc::post_pre_saved",
    "post_pre_saved(" MHC_SEAM_INPUTS MHC_PRE_ATTRS ") -> "
    "(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)"};
inline constexpr OpSchema kPostPreBackward{"mhc::post_pre_backward",
    "post_pre_backward(Tensor gx_next, Tensor gy, Tensor gpost_next, Tensor gP_next, Tensor f, Tensor post, "
    "Tensor x, Tensor P, Tensor? bias, Tensor x_next, Tensor h, Tensor ms, Tensor pre, Tensor logits, "
    "Tensor phi, Tensor alpha, Tensor beta, Tensor? weight, " MHC_PRE_ATTRS ") -> "
    "(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)"};
// The inference ops: the forward into preallocated outputs (mutable out=
// arguments, returning nothing), results bitwise those of post_pre, pre and
// expand_combine. They record no gradient (InferenceOps.cpp). Sinkhorn's
// mode is `sinkhorn_mode` here: torch.compile functionalizes a mutable op
// through auto_functionalized_v2(..., **kwargs), whose own parameter `mode`
// an argument of that name collides with (torch 2.11).
#define MHC_OUT_PRE_ATTRS                                                      \
  "int n, str layout, bool tf32, float norm_eps, float pre_eps, float post_mult, str sinkhorn_mode, " \
  "int iters, float eps"
inline constexpr OpSchema kPostPreOut{"mhc::post_pre_out",
    "post_pre_out(" MHC_SEAM_INPUTS MHC_OUT_PRE_ATTRS ", *, Tensor(a!) x_next, Tensor(b!) y, "
    "Tensor(c!) post_next, Tensor(d!) P_next) -> ()"};
inline constexpr OpSchema kPreOut{"mhc::pre_out",
    "pre_out(Tensor x, Tensor phi, Tensor alpha, Tensor beta, Tensor? weight, " MHC_OUT_PRE_ATTRS
    ", *, Tensor(a!) y, Tensor(b!) post, Tensor(c!) P) -> ()"};
inline constexpr OpSchema kExpandCombineOut{"mhc::expand_combine_out",
    "expand_combine_out(Tensor f, Tensor post, Tensor x, Tensor P, Tensor? bias, int n, str layout, *, "
    "Tensor(a!) out) -> ()"};
// Transformer Engine's fused_grad_x_acc_buffer (docs/MATH.md, "acc=f32"):
// an f32 tensor of x's shape that x's gradient accumulates in.
// expand_combine_backward_into stores its gx there (overwriting it),
// aggregate_backward_into adds its own in f32 in place, and project_backward
// given it as an f32 `acc` (with bf16 / f16 x) returns buffer + its own,
// summed in f32 and rounded once to x's dtype. With f32 x the buffer is x's
// dtype and these are acc=1's sums.
inline constexpr OpSchema kAggregateBackwardInto{"mhc::aggregate_backward_into",
    "aggregate_backward_into(Tensor gy, Tensor x, Tensor pre, int n, str layout, *, Tensor(a!) buffer) -> Tensor"};
inline constexpr OpSchema kExpandCombineBackwardInto{"mhc::expand_combine_backward_into",
    "expand_combine_backward_into(Tensor gout, Tensor f, Tensor post, Tensor x, Tensor P, Tensor? bias, int n, "
    "str layout, *, Tensor(a!) buffer) -> (Tensor, Tensor, Tensor, Tensor)"};
#undef MHC_SEAM_INPUTS
#undef MHC_PRE_ATTRS
#undef MHC_OUT_PRE_ATTRS

/// The typed dispatcher handle of `op`, looked up once per signature.
template <typename Sig, const OpSchema &op>
const c10::TypedOperatorHandle<Sig> &handle() {
  static auto h = c10::Dispatcher::singleton().findSchemaOrThrow(op.name, "").typed<Sig>();
  return h;
}

inline const auto &projectOp() { return handle<ProjectSig, kProject>(); }
inline const auto &scaleOp() { return handle<ScaleSig, kScale>(); }
inline const auto &sinkhornOp() { return handle<SinkhornSig, kSinkhorn>(); }
inline const auto &aggregateOp() { return handle<AggregateSig, kAggregate>(); }
inline const auto &expandCombineOp() { return handle<ExpandCombineSig, kExpandCombine>(); }
inline const auto &projectBackwardOp() { return handle<ProjectBackwardSig, kProjectBackward>(); }
inline const auto &scaleBackwardOp() { return handle<ScaleBackwardSig, kScaleBackward>(); }
inline const auto &sinkhornBackwardOp() { return handle<SinkhornBackwardSig, kSinkhornBackward>(); }
inline const auto &aggregateBackwardOp() { return handle<AggregateBackwardSig, kAggregateBackward>(); }
inline const auto &expandCombineBackwardOp() {
  return handle<ExpandCombineBackwardSig, kExpandCombineBackward>();
}
inline const auto &preOp() { return handle<PreSig, kPre>(); }
inline const auto &preSavedOp() { return handle<PreSavedSig, kPreSaved>(); }
inline const auto &preBackwardOp() { return handle<PreBackwardSig, kPreBackward>(); }

inline const auto &postPreOp() { return handle<PostPreSig, kPostPre>(); }
inline const auto &postPreSavedOp() { return handle<PostPreSavedSig, kPostPreSaved>(); }
inline const auto &postPreOutOp() { return handle<PostPreOutSig, kPostPreOut>(); }
inline const auto &preOutOp() { return handle<PreOutSig, kPreOut>(); }
inline const auto &expandCombineOutOp() {
  return handle<ExpandCombineOutSig, kExpandCombineOut>();
}
inline const auto &aggregateBackwardIntoOp() {
  return handle<AggregateBackwardIntoSig, kAggregateBackwardInto>();
}
inline const auto &expandCombineBackwardIntoOp() {
  return handle<ExpandCombineBackwardIntoSig, kExpandCombineBackwardInto>();
}
inline const auto &postPreBackwardOp() {
  return handle<PostPreBackwardSig, kPostPreBackward>();
}

} // namespace mhc::ops

#endif // MHC_RUNTIME_TORCH_OPHANDLES_H
