//===- SinkhornOps.cpp - torch.ops.mhc.sinkhorn and its gradient ----------===//

#include "OpEntries.h"

namespace mhc::ops {

namespace {
/// sinkhorn's rules are [logits]; sinkhorn_backward's [gP, logits].
Checker checkSinkhornInputs(const char *op, const Tensor *gP,
                            const Tensor &logits, int64_t n, Str mode,
                            int64_t iters, double eps) {
  checkSinkhorn(op, mode, iters, eps);
  Checker c(op, n);
  if (gP)
    c.args({gP, &logits});
  else
    c.args({&logits});
  return c;
}
} // namespace

Tensor sinkhorn_ref(const Tensor &logits, int64_t n, Str mode, int64_t iters,
                    double eps) {
  checkSinkhornInputs("sinkhorn", nullptr, logits, n, mode, iters, eps);
  return mhc::ref::sinkhorn(logits, std::string(mode), iters, eps);
}

Tensor sinkhorn_cuda(const Tensor &logits, int64_t n, Str mode, int64_t iters,
                     double eps) {
  Checker c = checkSinkhornInputs("sinkhorn", nullptr, logits, n, mode, iters, eps);
  auto spec = sinkhornSpec(mhc::Direction::Forward, n, mode, iters, eps);
  auto *k = select("sinkhorn", spec, {&logits}, c.M);
  if (!k)
    return mhc::ref::sinkhorn(logits, std::string(mode), iters, eps);
  Tensor P = at::empty_like(logits);
  launch(*k, c.M, {{"logits", &logits}, {"P", &P}}, logits);
  return P;
}

Tensor sinkhorn_backward_ref(const Tensor &gP, const Tensor &logits, int64_t n,
                             Str mode, int64_t iters, double eps) {
  checkSinkhornInputs("sinkhorn_backward", &gP, logits, n, mode, iters, eps);
  return mhc::ref::sinkhorn_backward(gP, logits, std::string(mode), iters, eps);
}

Tensor sinkhorn_backward_cuda(const Tensor &gP, const Tensor &logits,
                              int64_t n, Str mode, int64_t iters, double eps) {
  Checker c = checkSinkhornInputs("sinkhorn_backward", &gP, logits, n, mode,
                                  iters, eps);
  auto spec = sinkhornSpec(mhc::Direction::Backward, n, mode, iters, eps);
  auto *k = select("sinkhorn_backward", spec, {&gP, &logits}, c.M);
  if (!k)
    return mhc::ref::sinkhorn_backward(gP, logits, std::string(mode), iters, eps);
  Tensor g = emptyLike(logits);
  launch(*k, c.M, {{"gP", &gP}, {"logits", &logits}, {"glogits", &g}}, logits);
  return g;
}

} // namespace mhc::ops
