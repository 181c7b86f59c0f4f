//===- Reference.h - MATH.md in ATen, the fallback path ---------*- C++ -*-===//
//
// Every mhc op and its gradient written with ATen ops, for any device. It is
// the CPU implementation and the fallback of the CUDA one. Computes in f32
// (f64 when given f64) and returns contiguous outputs in the dtypes the
// kernels return.
//
//===----------------------------------------------------------------------===//

#ifndef MHC_TORCH_REFERENCE_H
#define MHC_TORCH_REFERENCE_H

#include <ATen/ATen.h>

#include <optional>
#include <string>
#include <tuple>

namespace mhc::ref {

using at::Tensor;
using OptTensor = std::optional<Tensor>;

/// The dtype of every op's arithmetic and of its mixing outputs (h, ms, pre,
/// post, logits, P and their gradients) for an activation or mixing input of
/// dtype `t`: float64 for float64 (the reference path, every tensor float64),
/// else float32. The fake kernels (python/mhc/_registry.py) read it too.
inline at::ScalarType mixingType(at::ScalarType t) {
  return t == at::kDouble ? at::kDouble : at::kFloat;
}

std::tuple<Tensor, Tensor> project(const Tensor &x, const Tensor &phi,
                                   const OptTensor &weight);
/// The backward of aggregate, project and expand_combine with `acc`: gx is
/// the op's own gradient of x in x's dtype, plus acc (ATen's add: for 2-byte
/// dtypes in f32, rounded once), the bits of the unfused `own.add(acc)`.
/// An f32 acc with 2-byte x is TE's f32 buffer (docs/MATH.md, "acc=f32"):
/// own + acc in f32, which aggregate and expand_combine return in f32 and
/// project rounds to x's dtype.
std::tuple<Tensor, Tensor, Tensor> project_backward(
    const Tensor &gh, const Tensor &gms, const Tensor &x, const Tensor &phi,
    const OptTensor &weight, const OptTensor &acc = std::nullopt);

std::tuple<Tensor, Tensor, Tensor> scale(const Tensor &h, const Tensor &ms,
                                         const Tensor &alpha,
                                         const Tensor &beta, int64_t n,
                                         double normEps, double preEps,
                                         double postMult);
std::tuple<Tensor, Tensor, Tensor, Tensor> scale_backward(
    const Tensor &gpre, const Tensor &gpost, const Tensor &glogits,
    const Tensor &h, const Tensor &ms, const Tensor &alpha, const Tensor &beta,
    int64_t n, double normEps, double preEps, double postMult);

Tensor sinkhorn(const Tensor &logits, const std::string &mode, int64_t iters,
                double eps);
Tensor sinkhorn_backward(const Tensor &gP, const Tensor &logits,
                         const std::string &mode, int64_t iters, double eps);

Tensor aggregate(const Tensor &x, const Tensor &pre, const std::string &layout);
std::tuple<Tensor, Tensor> aggregate_backward(const Tensor &gy,
                                              const Tensor &x,
                                              const Tensor &pre,
                                              const std::string &layout,
                                              const OptTensor &acc = std::nullopt);

Tensor expand_combine(const Tensor &f, const Tensor &post, const Tensor &x,
                      const Tensor &P, const OptTensor &bias,
                      const std::string &layout);
std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor> expand_combine_backward(
    const Tensor &gout, const Tensor &f, const Tensor &post, const Tensor &x,
    const Tensor &P, const OptTensor &bias, const std::string &layout,
    const OptTensor &acc = std::nullopt);

} // namespace mhc::ref

#endif // MHC_TORCH_REFERENCE_H
