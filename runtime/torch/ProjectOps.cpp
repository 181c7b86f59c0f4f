//===- ProjectOps.cpp - torch.ops.mhc.project and its gradient ------------===//

#include "OpEntries.h"

namespace mhc::ops {

Checker checkProject(const char *op, const Tensor &x, const Tensor &phi,
                     const OptTensor &weight, int64_t n, Str layout) {
  checkLayout(op, layout);
  Checker c(op, n);
  c.args({&x, &phi, weight ? &*weight : nullptr}, layout);
  return c;
}

std::tuple<Tensor, Tensor> project_ref(const Tensor &x, const Tensor &phi,
                                       const OptTensor &weight, int64_t n,
                                       Str layout, bool tf32) {
  checkProject("project", x, phi, weight, n, layout);
  return mhc::ref::project(x, phi, weight);
}

std::tuple<Tensor, Tensor> project_cuda(const Tensor &x, const Tensor &phi,
                                        const OptTensor &weight, int64_t n,
                                        Str layout, bool tf32) {
  Checker c = checkProject("project", x, phi, weight, n, layout);
  int64_t M = c.M, N = mhc::numLogits(n);
  auto spec = projectSpec(mhc::Direction::Forward, n, x, layout, c.C, phi, weight, tf32);
  Tensor w = orUndefined(weight);
  auto *k = select("project", spec, {&x, &phi, &w}, M);
  if (!k)
    return mhc::ref::project(x, phi, weight);
  auto mixing = x.options().dtype(mhc::ref::mixingType(x.scalar_type()));
  Tensor h = at::empty({M, N}, mixing);
  Tensor ms = at::empty({M}, mixing);
  launch(*k, M, {{"x", &x}, {"phi", &phi}, {"weight", &w}, {"h", &h}, {"ms", &ms}}, x);
  return {h, ms};
}

namespace {
Checker checkProjectBackward(const Tensor &gh, const Tensor &gms,
                             const Tensor &x, const Tensor &phi,
                             const OptTensor &weight, int64_t n, Str layout,
                             const OptTensor &acc) {
  Checker c = checkProject("project_backward", x, phi, weight, n, layout);
  // An f32 acc with 2-byte x: TE's f32 buffer (acc=f32), not x's dtype.
  bool buffer = acc && acc->scalar_type() == at::kFloat &&
                (x.scalar_type() == at::kBFloat16 || x.scalar_type() == at::kHalf);
  c.args({&gh, &gms, acc && !buffer ? &*acc : nullptr}, layout, /*first=*/3);
  if (buffer)
    checkBuffer("project_backward", {"acc", &*acc}, x, {});
  return c;
}
} // namespace

std::tuple<Tensor, Tensor, Tensor> project_backward_ref(
    const Tensor &gh, const Tensor &gms, const Tensor &x, const Tensor &phi,
    const OptTensor &weight, int64_t n, Str layout, bool tf32,
    const OptTensor &acc) {
  checkProjectBackward(gh, gms, x, phi, weight, n, layout, acc);
  return mhc::ref::project_backward(gh, gms, x, phi, weight, acc);
}

std::tuple<Tensor, Tensor, Tensor> project_backward_cuda(
    const Tensor &gh, const Tensor &gms, const Tensor &x, const Tensor &phi,
    const OptTensor &weight, int64_t n, Str layout, bool tf32,
    const OptTensor &acc) {
  Checker c = checkProjectBackward(gh, gms, x, phi, weight, n, layout, acc);
  int64_t M = c.M;
  auto spec = withAcc(
      projectSpec(mhc::Direction::Backward, n, x, layout, c.C, phi, weight, tf32), acc);
  Tensor w = orUndefined(weight), a = orUndefined(acc);
  auto *k = select("project_backward", spec, {&x, &phi, &w, &gh, &gms, &a}, M);
  if (!k)
    return mhc::ref::project_backward(gh, gms, x, phi, weight, acc);
  Tensor gx = emptyLike(x);
  Tensor gphi = emptyLike(phi);
  Tensor gw = weight ? emptyLike(*weight) : emptyOf({0}, phi);
  launch(*k, M, {{"gh", &gh}, {"gms", &gms}, {"x", &x}, {"phi", &phi},
                 {"weight", &w}, {"acc", &a}, {"gx", &gx}, {"gphi", &gphi}, {"gweight", &gw}},
         x);
  return {gx, gphi, gw};
}

} // namespace mhc::ops
