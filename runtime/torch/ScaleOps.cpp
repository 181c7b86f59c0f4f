//===- ScaleOps.cpp - torch.ops.mhc.scale and its gradient ----------------===//

#include "OpEntries.h"

namespace mhc::ops {

namespace {
Checker checkScaleInputs(const char *op, const Tensor &h, const Tensor &ms,
                         const Tensor &alpha, const Tensor &beta, int64_t n,
                         double normEps, double preEps, double postMult) {
  checkScale(op, normEps, preEps, postMult);
  Checker c(op, n);
  c.args({&h, &ms, &alpha, &beta});
  return c;
}

Checker checkScaleBackward(const Tensor &gpre, const Tensor &gpost,
                           const Tensor &glogits, const Tensor &h,
                           const Tensor &ms, const Tensor &alpha,
                           const Tensor &beta, int64_t n, double normEps,
                           double preEps, double postMult) {
  Checker c = checkScaleInputs("scale_backward", h, ms, alpha, beta, n,
                               normEps, preEps, postMult);
  c.args({&gpre, &gpost, &glogits}, "nc", /*first=*/4);
  return c;
}
} // namespace

std::tuple<Tensor, Tensor, Tensor> scale_ref(const Tensor &h, const Tensor &ms,
                                             const Tensor &alpha,
                                             const Tensor &beta, int64_t n,
                                             double normEps, double preEps,
                                             double postMult) {
  checkScaleInputs("scale", h, ms, alpha, beta, n, normEps, preEps, postMult);
  return mhc::ref::scale(h, ms, alpha, beta, n, normEps, preEps, postMult);
}

std::tuple<Tensor, Tensor, Tensor> scale_cuda(const Tensor &h, const Tensor &ms,
                                              const Tensor &alpha,
                                              const Tensor &beta, int64_t n,
                                              double normEps, double preEps,
                                              double postMult) {
  Checker c = checkScaleInputs("scale", h, ms, alpha, beta, n, normEps, preEps,
                               postMult);
  int64_t M = c.M;
  auto spec = scaleSpec(mhc::Direction::Forward, n, beta, normEps, preEps, postMult);
  auto *k = select("scale", spec, {&h, &ms, &alpha, &beta}, M);
  if (!k)
    return mhc::ref::scale(h, ms, alpha, beta, n, normEps, preEps, postMult);
  Tensor pre = at::empty({M, n}, h.options());
  Tensor post = at::empty({M, n}, h.options());
  Tensor logits = at::empty({M, n, n}, h.options());
  launch(*k, M, {{"h", &h}, {"ms", &ms}, {"alpha", &alpha}, {"beta", &beta},
                 {"pre", &pre}, {"post", &post}, {"logits", &logits}},
         h);
  return {pre, post, logits};
}

std::tuple<Tensor, Tensor, Tensor, Tensor> scale_backward_ref(
    const Tensor &gpre, const Tensor &gpost, const Tensor &glogits,
    const Tensor &h, const Tensor &ms, const Tensor &alpha, const Tensor &beta,
    int64_t n, double normEps, double preEps, double postMult) {
  checkScaleBackward(gpre, gpost, glogits, h, ms, alpha, beta, n, normEps,
                     preEps, postMult);
  return mhc::ref::scale_backward(gpre, gpost, glogits, h, ms, alpha, beta, n,
                                  normEps, preEps, postMult);
}

std::tuple<Tensor, Tensor, Tensor, Tensor> scale_backward_cuda(
    const Tensor &gpre, const Tensor &gpost, const Tensor &glogits,
    const Tensor &h, const Tensor &ms, const Tensor &alpha, const Tensor &beta,
    int64_t n, double normEps, double preEps, double postMult) {
  Checker c = checkScaleBackward(gpre, gpost, glogits, h, ms, alpha, beta, n,
                                 normEps, preEps, postMult);
  int64_t M = c.M;
  auto spec = scaleSpec(mhc::Direction::Backward, n, beta, normEps, preEps, postMult);
  auto *k = select("scale_backward", spec,
                   {&h, &ms, &alpha, &beta, &gpre, &gpost, &glogits}, M);
  if (!k)
    return mhc::ref::scale_backward(gpre, gpost, glogits, h, ms, alpha, beta,
                                    n, normEps, preEps, postMult);
  Tensor gh = emptyLike(h), gms = emptyLike(ms);
  Tensor galpha = emptyLike(alpha), gbeta = emptyLike(beta);
  launch(*k, M, {{"gpre", &gpre}, {"gpost", &gpost}, {"glogits", &glogits},
                 {"h", &h}, {"ms", &ms}, {"alpha", &alpha}, {"beta", &beta},
                 {"gh", &gh}, {"gms", &gms}, {"galpha", &galpha},
                 {"gbeta", &gbeta}},
         h);
  return {gh, gms, galpha, gbeta};
}

} // namespace mhc::ops
