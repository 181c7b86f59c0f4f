//===- Layer.cpp - torch.ops.mhc.pre: one layer's pre step in one call -----===//
//
// pre = project -> scale -> sinkhorn -> aggregate, as one op so that a small
// layer pays for one Python-to-C++ call instead of four (at M = 128 the host
// time of four calls is several times the kernels' device time). It is
// CompositeImplicitAutograd: the inner calls go through the dispatcher, so
// each one's autograd (Autograd.cpp), CPU reference and CUDA kernel apply
// unchanged, and torch.compile traces the four ops it decomposes into.
//
//===----------------------------------------------------------------------===//

#include "OpHandles.h"

#include <torch/library.h>

using namespace mhc::ops;

namespace {

std::tuple<Tensor, Tensor, Tensor>
pre(const Tensor &x, const Tensor &phi, const Tensor &alpha, const Tensor &beta,
    const OptTensor &weight, int64_t n, Str layout, bool tf32, double normEps,
    double preEps, double postMult, Str mode, int64_t iters, double eps) {
  auto [h, ms] = projectOp().call(x, phi, weight, n, layout, tf32);
  auto [preW, postW, logits] =
      scaleOp().call(h, ms, alpha, beta, n, normEps, preEps, postMult);
  Tensor P = sinkhornOp().call(logits, n, mode, iters, eps);
  return {aggregateOp().call(x, preW, n, layout), postW, P};
}

} // namespace

TORCH_LIBRARY_FRAGMENT(mhc, m) {
  m.def("pre(Tensor x, Tensor phi, Tensor alpha, Tensor beta, Tensor? weight, int n, str layout, bool tf32, "
        "float norm_eps, float pre_eps, float post_mult, str mode, int iters, float eps) -> (Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(mhc, CompositeImplicitAutograd, m) { m.impl("pre", &pre); }
