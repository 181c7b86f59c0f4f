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

/// The pre step's attributes as a node keeps them (the Pre and PostPre
/// nodes; their backward reads these keys).
inline void saveAttrs(AutogradContext *ctx, int64_t n, const std::string &layout,
                      bool tf32, double normEps, double preEps, double postMult,
                      const std::string &mode, int64_t iters, double eps) {
  ctx->saved_data["n"] = n;
  ctx->saved_data["layout"] = layout;
  ctx->saved_data["tf32"] = tf32;
  ctx->saved_data["scale"] = std::vector<double>{normEps, preEps, postMult};
  ctx->saved_data["mode"] = mode;
  ctx->saved_data["iters"] = iters;
  ctx->saved_data["eps"] = eps;
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

/// Calls the backward op `handle`; with a graph to record (any of `inputs`
/// requires grad under grad mode), through FirstOrderOnly.
template <typename Sig, typename... Args>
auto firstOrderOnly(const char *op, const c10::TypedOperatorHandle<Sig> &handle,
                    std::initializer_list<OptTensor> inputs, const Args &...args) {
  using Out = decltype(handle.call(args...));
  // A backward pass runs with grad mode off: decided before any tensor is
  // copied (post_pre_backward has 18 inputs).
  bool graph = at::GradMode::is_enabled() &&
               std::any_of(inputs.begin(), inputs.end(), [](const OptTensor &t) {
                 return t && t->defined() && t->requires_grad();
               });
  if (!graph)
    return belowAutograd(handle, args...);
  std::vector<Tensor> defined;
  for (const OptTensor &t : inputs)
    if (t && t->defined())
      defined.push_back(*t);
  return outOf<Out>(FirstOrderOnly::apply(op, at::TensorList(defined), [&] {
    return listOf(handle.call(args...));
  }));
}

} // namespace mhc::ops

#endif // MHC_TORCH_AUTOGRADUTIL_H
