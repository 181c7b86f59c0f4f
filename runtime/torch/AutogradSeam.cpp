//===- AutogradSeam.cpp - the layer seam as one autograd node -------------===//
//
// torch.ops.mhc.post_pre under autograd: one node whose forward is
// post_pre_saved and whose backward is post_pre_backward (docs/design/
// seam.md). It keeps each tensor once and no y: x_next is the next seam's x
// (the same tensor), so a stack keeps each x_l once.
//
//===----------------------------------------------------------------------===//

#include "AutogradUtil.h"

#include <torch/library.h>

using namespace mhc::ops;

namespace {

struct PostPre : torch::autograd::Function<PostPre> {
  static variable_list forward(AutogradContext *ctx, Tensor f, Tensor post,
                               Tensor x, Tensor P, OptTensor bias, Tensor phi,
                               Tensor alpha, Tensor beta, OptTensor weight,
                               int64_t n, std::string layout, bool tf32,
                               double normEps, double preEps, double postMult,
                               std::string mode, int64_t iters, double eps) {
    auto [xNext, h, ms, pre, postNext, logits, PNext, y] = belowAutograd(
        postPreSavedOp(), f, post, x, P, bias, phi, alpha, beta, weight, n,
        layout, tf32, normEps, preEps, postMult, mode, iters, eps);
    // The missing gradients' zeros take their shapes from these: y's from
    // f (the dtype of x), post_next's from pre, P_next's from logits.
    ctx->save_for_backward({x, f, post, P, bias.value_or(Tensor()), xNext, h,
                            ms, pre, logits, phi, alpha, beta,
                            weight.value_or(Tensor())});
    saveAttrs(ctx, n, layout, tf32, normEps, preEps, postMult, mode, iters, eps);
    return {xNext, y, postNext, PNext};
  }

  static variable_list backward(AutogradContext *ctx, variable_list g) {
    auto s = ctx->get_saved_variables();
    const Tensor &x = s[0], &f = s[1], &post = s[2], &P = s[3], &bias = s[4];
    const Tensor &xNext = s[5], &h = s[6], &ms = s[7], &pre = s[8];
    const Tensor &logits = s[9], &phi = s[10], &alpha = s[11], &beta = s[12];
    const Tensor &weight = s[13];
    PreAttrs a = savedAttrs(ctx);
    auto [gx, gf, gpost, gP, gbias, gphi, galpha, gbeta, gweight] =
        postPreBackwardOp().call(
            grad(g[0], xNext), grad(g[1], f), grad(g[2], pre),
            grad(g[3], logits), f, post, x, P, opt(bias), xNext, h, ms, pre,
            logits, phi, alpha, beta, opt(weight), a.n, a.layout, a.tf32,
            a.normEps, a.preEps, a.postMult, a.mode, a.iters, a.eps);
    variable_list out{gf,   gpost,  gx,    gP,
                      bias.defined() ? gbias : Tensor(),
                      gphi, galpha, gbeta, weight.defined() ? gweight : Tensor()};
    out.resize(18); // no gradient for the nine attributes
    return out;
  }
};

std::tuple<Tensor, Tensor, Tensor, Tensor>
postPreAutograd(const Tensor &f, const Tensor &post, const Tensor &x,
                const Tensor &P, const OptTensor &bias, const Tensor &phi,
                const Tensor &alpha, const Tensor &beta,
                const OptTensor &weight, int64_t n, Str layout, bool tf32,
                double normEps, double preEps, double postMult, Str mode,
                int64_t iters, double eps) {
  const Tensor none;
  if (noGraph({&f, &post, &x, &P, bias ? &*bias : &none, &phi, &alpha, &beta,
               weight ? &*weight : &none}))
    return belowAutograd(postPreOp(), f, post, x, P, bias, phi, alpha, beta,
                         weight, n, layout, tf32, normEps, preEps, postMult,
                         mode, iters, eps);
  auto out = PostPre::apply(f, post, x, P, bias, phi, alpha, beta, weight, n,
                            std::string(layout), tf32, normEps, preEps,
                            postMult, std::string(mode), iters, eps);
  return {out[0], out[1], out[2], out[3]};
}

/// post_pre_saved is the forward half of PostPre (called below autograd
/// there); a direct call records no graph.
std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor>
postPreSavedAutograd(const Tensor &f, const Tensor &post, const Tensor &x,
                     const Tensor &P, const OptTensor &bias, const Tensor &phi,
                     const Tensor &alpha, const Tensor &beta,
                     const OptTensor &weight, int64_t n, Str layout, bool tf32,
                     double normEps, double preEps, double postMult, Str mode,
                     int64_t iters, double eps) {
  return belowAutograd(postPreSavedOp(), f, post, x, P, bias, phi, alpha, beta,
                       weight, n, layout, tf32, normEps, preEps, postMult, mode,
                       iters, eps);
}

std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor>
postPreBackwardAutograd(
    const Tensor &gxNext, const Tensor &gy, const Tensor &gpostNext,
    const Tensor &gPNext, const Tensor &f, const Tensor &post, const Tensor &x,
    const Tensor &P, const OptTensor &bias, const Tensor &xNext,
    const Tensor &h, const Tensor &ms, const Tensor &pre, const Tensor &logits,
    const Tensor &phi, const Tensor &alpha, const Tensor &beta,
    const OptTensor &weight, int64_t n, Str layout, bool tf32, double normEps,
    double preEps, double postMult, Str mode, int64_t iters, double eps) {
  return firstOrderOnly(
      "post_pre", postPreBackwardOp(), gxNext, gy, gpostNext, gPNext, f, post,
      x, P, bias, xNext, h, ms, pre,
      logits, phi, alpha, beta, weight, n, layout, tf32, normEps, preEps,
      postMult, mode, iters, eps);
}

} // namespace

TORCH_LIBRARY_IMPL(mhc, Autograd, m) {
  m.impl("post_pre", &postPreAutograd);
  m.impl("post_pre_saved", &postPreSavedAutograd);
  m.impl("post_pre_backward", &postPreBackwardAutograd);
}
