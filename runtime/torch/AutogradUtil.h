//===- AutogradUtil.h - helpers of the autograd wrappers --------*- C++ -*-===//
//
// What every autograd wrapper of torch.ops.mhc.* uses (Autograd.cpp,
// AutogradSeam.cpp): the call below the Autograd key, zeros for missing
// upstream gradients, the no-graph shortcut, and FirstOrderOnly, which makes
// differentiating a *_backward op raise a clear error.
//
//===----------------------------------------------------------------------===//

#ifndef MHC_TORCH_AUTOGRADUTIL_H
#define MHC_TORCH_AUTOGRADUTIL_H

#include "OpHandles.h"
#include "Specs.h"

#include <torch/autograd.h>

#include <algorithm>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace mhc::ops {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

/// Calls `op` below the Autograd key: the kernel itself, recording nothing.
template <typename Sig, typename... Args>
decltype(auto) belowAutograd(const c10::TypedOperatorHandle<Sig> &op,
                             Args &&...args) {
  at::AutoDispatchBelowADInplaceOrView guard;
  return op.call(std::forward<Args>(args)...);
}

inline Tensor grad(const Tensor &g, const Tensor &like) {
  return g.defined() ? g.contiguous() : at::zeros_like(like);
}

inline OptTensor opt(const Tensor &t) { return t.defined() ? OptTensor(t) : std::nullopt; }

/// True when this call records no graph: then the wrappers go straight
/// to the kernel (Function::apply builds a node and its saved state on every
/// call, a few microseconds of host time).
inline bool noGraph(std::initializer_list<const Tensor *> inputs) {
  if (!at::GradMode::is_enabled())
    return true;
  for (const Tensor *t : inputs)
    if (t->defined() && t->requires_grad())
      return false;
  return true;
}

/// The pre step's attributes as the Pre and PostPre nodes keep them: one
/// saved_data entry (a tuple) written in the forward and read once in the
/// backward, instead of an entry (hash-map node, IValue) per attribute.
inline void saveAttrs(AutogradContext *ctx, int64_t n, const std::string &layout,
                      bool tf32, double normEps, double preEps, double postMult,
                      const std::string &mode, int64_t iters, double eps) {
  ctx->saved_data["attrs"] = c10::ivalue::Tuple::create(
      {n, layout, tf32, normEps, preEps, postMult, mode, iters, eps});
}

/// saveAttrs' values (the pre step's attributes, Specs.h); the strings view
/// the node's saved tuple.
inline PreAttrs savedAttrs(AutogradContext *ctx) {
  const auto &e = ctx->saved_data["attrs"].toTupleRef().elements();
  return {e[0].toInt(),    e[1].toStringRef(), e[2].toBool(),
          e[3].toDouble(), e[4].toDouble(),    e[5].toDouble(),
          e[6].toStringRef(), e[7].toInt(),    e[8].toDouble()};
}

inline variable_list listOf(const Tensor &t) { return {t}; }
template <typename... T> variable_list listOf(const std::tuple<T...> &t) {
  return std::apply([](const auto &...v) { return variable_list{v...}; }, t);
}
template <typename Tuple, size_t... I>
Tuple tupleOf(const variable_list &v, std::index_sequence<I...>) {
  return Tuple{v[I]...};
}
template <typename Out> Out outOf(const variable_list &v) {
  if constexpr (std::is_same_v<Out, Tensor>)
    return v[0];
  else
    return tupleOf<Out>(v, std::make_index_sequence<std::tuple_size_v<Out>>());
}

/// A *_backward op's call while a graph is recorded (a backward with
/// create_graph=True): its outputs hang off this node, which raises when it
/// is differentiated, instead of PyTorch's deprecated autograd fallthrough
/// (which would give silently wrong second-order gradients).
struct FirstOrderOnly : torch::autograd::Function<FirstOrderOnly> {
  static variable_list forward(AutogradContext *ctx, const char *op,
                               at::TensorList inputs,
                               const std::function<variable_list()> &run) {
    ctx->saved_data["op"] = std::string(op);
    at::AutoDispatchBelowADInplaceOrView guard;
    return run();
  }
  static variable_list backward(AutogradContext *ctx, variable_list) {
    TORCH_CHECK(false, "mhc: double backward (second-order gradients) is not "
                "supported by mhc.", ctx->saved_data["op"].toStringRef(),
                " (mhc.", ctx->saved_data["op"].toStringRef(),
                "_backward has no gradient)");
  }
};

/// Whether a tensor argument of a *_backward op needs a graph recorded
/// (requires grad); false for the op's other arguments.
inline bool needsGraph(const Tensor &t) { return t.defined() && t.requires_grad(); }
inline bool needsGraph(const OptTensor &t) { return t && needsGraph(*t); }
template <typename T> bool needsGraph(const T &) { return false; }

/// The defined tensors among a *_backward op's arguments, in order.
inline void collectDefined(std::vector<Tensor> &out, const Tensor &t) {
  if (t.defined())
    out.push_back(t);
}
inline void collectDefined(std::vector<Tensor> &out, const OptTensor &t) {
  if (t)
    collectDefined(out, *t);
}
template <typename T> void collectDefined(std::vector<Tensor> &, const T &) {}

/// Calls the backward op `handle` with `args`; with a graph to record (a
/// tensor argument requires grad under grad mode), through FirstOrderOnly.
/// A backward pass runs with grad mode off: that is decided first, with no
/// tensor copied (post_pre_backward has 18 tensor arguments).
template <typename Sig, typename... Args>
auto firstOrderOnly(const char *op, const c10::TypedOperatorHandle<Sig> &handle,
                    const Args &...args) {
  using Out = decltype(handle.call(args...));
  if (!at::GradMode::is_enabled() || !(needsGraph(args) || ...))
    return belowAutograd(handle, args...);
  std::vector<Tensor> defined;
  (collectDefined(defined, args), ...);
  return outOf<Out>(FirstOrderOnly::apply(op, at::TensorList(defined), [&] {
    return listOf(handle.call(args...));
  }));
}

} // namespace mhc::ops

#endif // MHC_TORCH_AUTOGRADUTIL_H
