//===- InferenceOps.cpp - the Autograd entries of the mutating ops --------===//
//
// torch.ops.mhc.post_pre_out, pre_out and expand_combine_out (OpHandles.h)
// compute the forward into preallocated outputs, for inference engines and
// CUDA graphs; they record no gradient. Their Autograd entry refuses a call
// that would need one (grad mode on and an input or out= tensor requiring
// grad), calls the kernel below autograd and bumps the out= tensors'
// versions, as an in-place op does. The CPU and CUDA entries are in
// SeamOps.cpp, PreOps.cpp and ExpandCombineOps.cpp. The same for the f32
// x-gradient buffer ops (aggregate_backward_into, expand_combine_backward_into).
//
//===----------------------------------------------------------------------===//

#include "AutogradUtil.h"

#include <torch/library.h>

namespace mhc::ops {

namespace {

/// Raises unless the call needs no gradient (noGraph of `tensors`).
void inferenceOnly(const char *op, const char *training,
                   std::initializer_list<const Tensor *> tensors) {
  if (noGraph(tensors))
    return;
  TORCH_CHECK(false, "mhc.", op,
              " records no gradient: call it under torch.no_grad() or "
              "torch.inference_mode(), or use ",
              training, " for training (an input requires grad)");
}

/// The out= tensors were written in place: their version counters move (an
/// inference tensor has none).
void written(std::initializer_list<const Tensor *> outs) {
  for (const Tensor *t : outs)
    if (!t->is_inference())
      torch::autograd::impl::bump_version(*t);
}

/// An optional input for noGraph: an undefined tensor when absent.
const Tensor *ptr(const OptTensor &t) {
  static const Tensor none;
  return t ? &*t : &none;
}

void postPreOutAutograd(const Tensor &f, const Tensor &post, const Tensor &x,
                        const Tensor &P, const OptTensor &bias,
                        const Tensor &phi, const Tensor &alpha,
                        const Tensor &beta, const OptTensor &weight, int64_t n,
                        Str layout, bool tf32, double normEps, double preEps,
                        double postMult, Str mode, int64_t iters, double eps,
                        const Tensor &xNext, const Tensor &y,
                        const Tensor &postNext, const Tensor &PNext) {
  inferenceOnly("post_pre_out", "mhc.post_pre",
                {&f, &post, &x, &P, ptr(bias), &phi, &alpha, &beta,
                 ptr(weight), &xNext, &y, &postNext, &PNext});
  belowAutograd(postPreOutOp(), f, post, x, P, bias, phi, alpha, beta, weight,
                n, layout, tf32, normEps, preEps, postMult, mode, iters, eps,
                xNext, y, postNext, PNext);
  written({&xNext, &y, &postNext, &PNext});
}

void preOutAutograd(const Tensor &x, const Tensor &phi, const Tensor &alpha,
                    const Tensor &beta, const OptTensor &weight, int64_t n,
                    Str layout, bool tf32, double normEps, double preEps,
                    double postMult, Str mode, int64_t iters, double eps,
                    const Tensor &y, const Tensor &post, const Tensor &P) {
  inferenceOnly("pre_out", "mhc.pre",
                {&x, &phi, &alpha, &beta, ptr(weight), &y, &post, &P});
  belowAutograd(preOutOp(), x, phi, alpha, beta, weight, n, layout, tf32,
                normEps, preEps, postMult, mode, iters, eps, y, post, P);
  written({&y, &post, &P});
}

void expandCombineOutAutograd(const Tensor &f, const Tensor &post,
                              const Tensor &x, const Tensor &P,
                              const OptTensor &bias, int64_t n, Str layout,
                              const Tensor &out) {
  inferenceOnly("expand_combine_out", "mhc.post",
                {&f, &post, &x, &P, ptr(bias), &out});
  belowAutograd(expandCombineOutOp(), f, post, x, P, bias, n, layout, out);
  written({&out});
}

/// TE's f32 buffer ops (OpHandles.h) are gradients themselves: they record
/// none (grad mode is off in a backward unless it builds a graph).
void gradientOnly(const char *op, std::initializer_list<const Tensor *> tensors) {
  TORCH_CHECK(noGraph(tensors), "mhc.", op,
              " records no gradient (it computes one): call it from a backward "
              "without create_graph, or under torch.no_grad()");
}

Tensor aggregateBackwardIntoAutograd(const Tensor &gy, const Tensor &x, const Tensor &pre,
                                     int64_t n, Str layout, const Tensor &buffer) {
  gradientOnly("aggregate_backward_into", {&gy, &x, &pre, &buffer});
  Tensor gpre = belowAutograd(aggregateBackwardIntoOp(), gy, x, pre, n, layout, buffer);
  written({&buffer});
  return gpre;
}

std::tuple<Tensor, Tensor, Tensor, Tensor> expandCombineBackwardIntoAutograd(
    const Tensor &gout, const Tensor &f, const Tensor &post, const Tensor &x,
    const Tensor &P, const OptTensor &bias, int64_t n, Str layout, const Tensor &buffer) {
  gradientOnly("expand_combine_backward_into", {&gout, &f, &post, &x, &P, ptr(bias), &buffer});
  auto grads = belowAutograd(expandCombineBackwardIntoOp(), gout, f, post, x, P, bias, n,
                             layout, buffer);
  written({&buffer});
  return grads;
}

} // namespace

} // namespace mhc::ops

TORCH_LIBRARY_IMPL(mhc, Autograd, m) {
  m.impl("aggregate_backward_into", &mhc::ops::aggregateBackwardIntoAutograd);
  m.impl("expand_combine_backward_into", &mhc::ops::expandCombineBackwardIntoAutograd);
  m.impl("post_pre_out", &mhc::ops::postPreOutAutograd);
  m.impl("pre_out", &mhc::ops::preOutAutograd);
  m.impl("expand_combine_out", &mhc::ops::expandCombineOutAutograd);
}
