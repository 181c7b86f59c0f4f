//===- OpHandles.h - typed dispatcher handles of torch.ops.mhc.* -----------===//
//
// The ops' C++ signatures and their handles, looked up once. Used by
// the autograd wrappers (Autograd.cpp) to call the ops through the
// dispatcher.
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
    const OptTensor &, int64_t, Str, bool);
using ScaleBackwardSig = std::tuple<Tensor, Tensor, Tensor, Tensor>(
    const Tensor &, const Tensor &, const Tensor &, const Tensor &,
    const Tensor &, const Tensor &, const Tensor &, int64_t, double, double,
    double);
using SinkhornBackwardSig = Tensor(const Tensor &, const Tensor &, int64_t, Str,
                                   int64_t, double);
using AggregateBackwardSig = std::tuple<Tensor, Tensor>(
    const Tensor &, const Tensor &, const Tensor &, int64_t, Str);
using ExpandCombineBackwardSig =
    std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor>(
        const Tensor &, const Tensor &, const Tensor &, const Tensor &,
        const Tensor &, const OptTensor &, int64_t, Str);
template <typename Out>
using PreSigOf = Out(const Tensor &, const Tensor &, const Tensor &,
                     const Tensor &, const OptTensor &, int64_t, Str, bool,
                     double, double, double, Str, int64_t, double);
using PreSig = PreSigOf<std::tuple<Tensor, Tensor, Tensor>>;
using PreSavedSig = PreSigOf<
    std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor>>;

inline c10::OperatorHandle op(const char *name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "");
}

inline const c10::TypedOperatorHandle<ProjectSig> &projectOp() {
  static auto handle = op("mhc::project").typed<ProjectSig>();
  return handle;
}
inline const c10::TypedOperatorHandle<ScaleSig> &scaleOp() {
  static auto handle = op("mhc::scale").typed<ScaleSig>();
  return handle;
}
inline const c10::TypedOperatorHandle<SinkhornSig> &sinkhornOp() {
  static auto handle = op("mhc::sinkhorn").typed<SinkhornSig>();
  return handle;
}
inline const c10::TypedOperatorHandle<AggregateSig> &aggregateOp() {
  static auto handle = op("mhc::aggregate").typed<AggregateSig>();
  return handle;
}
inline const c10::TypedOperatorHandle<ExpandCombineSig> &expandCombineOp() {
  static auto handle = op("mhc::expand_combine").typed<ExpandCombineSig>();
  return handle;
}

inline const c10::TypedOperatorHandle<ProjectBackwardSig> &projectBackwardOp() {
  static auto handle = op("mhc::project_backward").typed<ProjectBackwardSig>();
  return handle;
}
inline const c10::TypedOperatorHandle<ScaleBackwardSig> &scaleBackwardOp() {
  static auto handle = op("mhc::scale_backward").typed<ScaleBackwardSig>();
  return handle;
}
inline const c10::TypedOperatorHandle<SinkhornBackwardSig> &sinkhornBackwardOp() {
  static auto handle = op("mhc::sinkhorn_backward").typed<SinkhornBackwardSig>();
  return handle;
}
inline const c10::TypedOperatorHandle<AggregateBackwardSig> &aggregateBackwardOp() {
  static auto handle = op("mhc::aggregate_backward").typed<AggregateBackwardSig>();
  return handle;
}
inline const c10::TypedOperatorHandle<ExpandCombineBackwardSig> &expandCombineBackwardOp() {
  static auto handle = op("mhc::expand_combine_backward").typed<ExpandCombineBackwardSig>();
  return handle;
}
inline const c10::TypedOperatorHandle<PreSig> &preOp() {
  static auto handle = op("mhc::pre").typed<PreSig>();
  return handle;
}
inline const c10::TypedOperatorHandle<PreSavedSig> &preSavedOp() {
  static auto handle = op("mhc::pre_saved").typed<PreSavedSig>();
  return handle;
}

} // namespace mhc::ops

#endif // MHC_RUNTIME_TORCH_OPHANDLES_H
