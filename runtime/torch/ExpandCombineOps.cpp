//===- ExpandCombineOps.cpp - torch.ops.mhc.expand_combine and gradient ---===//

#include "OpEntries.h"

namespace mhc::ops {

namespace {
Checker checkCombine(const char *op, const Tensor &f, const Tensor &post,
                     const Tensor &x, const Tensor &P, const OptTensor &bias,
                     int64_t n, Str layout) {
  checkLayout(op, layout);
  Checker c(op, n);
  c.args({&x, &f, &post, &P, bias ? &*bias : nullptr}, layout);
  return c;
}

Checker checkCombineBackward(const Tensor &gout, const Tensor &f,
                             const Tensor &post, const Tensor &x,
                             const Tensor &P, const OptTensor &bias, int64_t n,
                             Str layout, const OptTensor &acc,
                             const char *op = "expand_combine_backward") {
  Checker c = checkCombine(op, f, post, x, P, bias, n, layout);
  c.args({&gout, acc ? &*acc : nullptr}, layout, /*first=*/5);
  return c;
}
} // namespace

Tensor expand_combine_ref(const Tensor &f, const Tensor &post, const Tensor &x,
                          const Tensor &P, const OptTensor &bias, int64_t n,
                          Str layout) {
  checkCombine("expand_combine", f, post, x, P, bias, n, layout);
  return mhc::ref::expand_combine(f, post, x, P, bias, std::string(layout));
}

namespace {
/// expand_combine_out's checks: the inputs', then out like x.
Checker checkCombineOut(const Tensor &f, const Tensor &post, const Tensor &x,
                        const Tensor &P, const OptTensor &bias, int64_t n,
                        Str layout, const Tensor &out) {
  Checker c = checkCombine("expand_combine", f, post, x, P, bias, n, layout);
  checkOut("expand_combine_out", {"out", &out}, x.sizes(), x.scalar_type(), x,
           {{"f", &f}, {"post", &post}, {"x", &x}, {"P", &P},
            {"bias", bias ? &*bias : nullptr}});
  return c;
}
} // namespace

void expand_combine_out_ref(const Tensor &f, const Tensor &post, const Tensor &x,
                            const Tensor &P, const OptTensor &bias, int64_t n,
                            Str layout, const Tensor &out) {
  checkCombineOut(f, post, x, P, bias, n, layout, out);
  out.copy_(mhc::ref::expand_combine(f, post, x, P, bias, std::string(layout)));
}

/// The kernel writes `out` where it runs; the reference's result is copied.
void expand_combine_out_cuda(const Tensor &f, const Tensor &post,
                             const Tensor &x, const Tensor &P,
                             const OptTensor &bias, int64_t n, Str layout,
                             const Tensor &out) {
  Checker c = checkCombineOut(f, post, x, P, bias, n, layout, out);
  auto spec = combineSpec(mhc::Direction::Forward, n, x, layout, c.C, bias);
  Tensor b = orUndefined(bias);
  auto *k = select("expand_combine", spec, {&x, &f, &post, &P, &b}, c.M);
  if (!k)
    return void(out.copy_(
        mhc::ref::expand_combine(f, post, x, P, bias, std::string(layout))));
  launch(*k, c.M, {{"f", &f}, {"post", &post}, {"x", &x}, {"P", &P},
                   {"bias", &b}, {"out", &out}},
         x);
}

Tensor expand_combine_cuda(const Tensor &f, const Tensor &post, const Tensor &x,
                           const Tensor &P, const OptTensor &bias, int64_t n,
                           Str layout) {
  Checker c = checkCombine("expand_combine", f, post, x, P, bias, n, layout);
  auto spec = combineSpec(mhc::Direction::Forward, n, x, layout, c.C, bias);
  Tensor b = orUndefined(bias);
  auto *k = select("expand_combine", spec, {&x, &f, &post, &P, &b}, c.M);
  if (!k)
    return mhc::ref::expand_combine(f, post, x, P, bias, std::string(layout));
  Tensor out = emptyLike(x);
  launch(*k, c.M, {{"f", &f}, {"post", &post}, {"x", &x}, {"P", &P},
                   {"bias", &b}, {"out", &out}},
         x);
  return out;
}

std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor> expand_combine_backward_ref(
    const Tensor &gout, const Tensor &f, const Tensor &post, const Tensor &x,
    const Tensor &P, const OptTensor &bias, int64_t n, Str layout,
    const OptTensor &acc) {
  checkCombineBackward(gout, f, post, x, P, bias, n, layout, acc);
  return mhc::ref::expand_combine_backward(gout, f, post, x, P, bias,
                                           std::string(layout), acc);
}

std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor> expand_combine_backward_cuda(
    const Tensor &gout, const Tensor &f, const Tensor &post, const Tensor &x,
    const Tensor &P, const OptTensor &bias, int64_t n, Str layout,
    const OptTensor &acc) {
  Checker c = checkCombineBackward(gout, f, post, x, P, bias, n, layout, acc);
  auto spec = withAcc(combineSpec(mhc::Direction::Backward, n, x, layout, c.C, bias), acc);
  Tensor b = orUndefined(bias), a = orUndefined(acc);
  auto *k = select("expand_combine_backward", spec,
                   {&x, &gout, &f, &post, &P, &b, &a}, c.M);
  if (!k)
    return mhc::ref::expand_combine_backward(gout, f, post, x, P, bias,
                                             std::string(layout), acc);
  Tensor gf = emptyLike(f), gpost = emptyLike(post);
  Tensor gx = emptyLike(x), gP = emptyLike(P);
  Tensor gbias = bias ? emptyLike(*bias) : emptyOf({0}, x);
  launch(*k, c.M, {{"gout", &gout}, {"f", &f}, {"post", &post}, {"x", &x},
                   {"P", &P}, {"bias", &b}, {"acc", &a}, {"gf", &gf}, {"gpost", &gpost},
                   {"gx", &gx}, {"gP", &gP}, {"gbias", &gbias}},
         x);
  return {gf, gpost, gx, gP, gbias};
}

namespace {
using CombineGrads = std::tuple<Tensor, Tensor, Tensor, Tensor>;

Checker checkCombineInto(const Tensor &gout, const Tensor &f, const Tensor &post,
                         const Tensor &x, const Tensor &P, const OptTensor &bias,
                         int64_t n, Str layout, const Tensor &buffer) {
  const char *op = "expand_combine_backward_into";
  Checker c = checkCombineBackward(gout, f, post, x, P, bias, n, layout, std::nullopt, op);
  checkBuffer(op, {"buffer", &buffer}, x,
              {{"gout", &gout}, {"f", &f}, {"post", &post}, {"x", &x}, {"P", &P}});
  return c;
}

/// buffer = own, in the buffer's f32 (the reference); gf, gpost, gP, gbias.
CombineGrads combineIntoRef(const Tensor &gout, const Tensor &f, const Tensor &post,
                            const Tensor &x, const Tensor &P, const OptTensor &bias,
                            Str layout, const Tensor &buffer) {
  // (A zero acc of the buffer's dtype: the reference's own gx, unrounded.)
  OptTensor zero;
  if (buffer.scalar_type() != x.scalar_type())
    zero = at::zeros_like(buffer);
  auto [gf, gpost, gx, gP, gbias] =
      mhc::ref::expand_combine_backward(gout, f, post, x, P, bias, std::string(layout), zero);
  buffer.copy_(gx);
  return {gf, gpost, gP, gbias};
}
} // namespace

CombineGrads expand_combine_backward_into_ref(const Tensor &gout, const Tensor &f,
                                              const Tensor &post, const Tensor &x,
                                              const Tensor &P, const OptTensor &bias,
                                              int64_t n, Str layout, const Tensor &buffer) {
  checkCombineInto(gout, f, post, x, P, bias, n, layout, buffer);
  return combineIntoRef(gout, f, post, x, P, bias, layout, buffer);
}

CombineGrads expand_combine_backward_into_cuda(const Tensor &gout, const Tensor &f,
                                               const Tensor &post, const Tensor &x,
                                               const Tensor &P, const OptTensor &bias,
                                               int64_t n, Str layout, const Tensor &buffer) {
  Checker c = checkCombineInto(gout, f, post, x, P, bias, n, layout, buffer);
  auto spec = withBuffer(combineSpec(mhc::Direction::Backward, n, x, layout, c.C, bias));
  Tensor b = orUndefined(bias), none;
  auto *k = select("expand_combine_backward_into", spec,
                   {&x, &gout, &f, &post, &P, &b, &buffer}, c.M);
  if (!k)
    return combineIntoRef(gout, f, post, x, P, bias, layout, buffer);
  Tensor gf = at::empty_like(f), gpost = at::empty_like(post), gP = at::empty_like(P);
  Tensor gbias = bias ? at::empty_like(*bias) : at::empty({0}, x.options());
  launch(*k, c.M, {{"gout", &gout}, {"f", &f}, {"post", &post}, {"x", &x},
                   {"P", &P}, {"bias", &b}, {"acc", &none}, {"gf", &gf}, {"gpost", &gpost},
                   {"gx", &buffer}, {"gP", &gP}, {"gbias", &gbias}},
         x);
  return {gf, gpost, gP, gbias};
}

} // namespace mhc::ops
