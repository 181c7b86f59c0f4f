//===- AggregateOps.cpp - torch.ops.mhc.aggregate and its gradient --------===//

#include "OpEntries.h"

namespace mhc::ops {

namespace {
Checker checkAggregate(const char *op, const Tensor &x, const Tensor &pre,
                       int64_t n, Str layout) {
  checkLayout(op, layout);
  Checker c(op, n);
  c.args({&x, &pre}, layout);
  return c;
}
} // namespace

Tensor aggregate_ref(const Tensor &x, const Tensor &pre, int64_t n, Str layout) {
  checkAggregate("aggregate", x, pre, n, layout);
  return mhc::ref::aggregate(x, pre, std::string(layout));
}

Tensor aggregate_cuda(const Tensor &x, const Tensor &pre, int64_t n, Str layout) {
  Checker c = checkAggregate("aggregate", x, pre, n, layout);
  auto spec = aggregateSpec(mhc::Direction::Forward, n, x, layout, c.C);
  auto *k = select("aggregate", spec, {&x, &pre}, c.M);
  if (!k)
    return mhc::ref::aggregate(x, pre, std::string(layout));
  Tensor y = at::empty({c.M, c.C}, x.options());
  launch(*k, c.M, {{"x", &x}, {"pre", &pre}, {"y", &y}}, x);
  return y;
}

namespace {
Checker checkAggregateBackward(const Tensor &gy, const Tensor &x,
                               const Tensor &pre, int64_t n, Str layout,
                               const OptTensor &acc) {
  Checker c = checkAggregate("aggregate_backward", x, pre, n, layout);
  c.args({&gy, acc ? &*acc : nullptr}, layout, /*first=*/2);
  return c;
}
} // namespace

std::tuple<Tensor, Tensor> aggregate_backward_ref(const Tensor &gy,
                                                  const Tensor &x,
                                                  const Tensor &pre, int64_t n,
                                                  Str layout,
                                                  const OptTensor &acc) {
  checkAggregateBackward(gy, x, pre, n, layout, acc);
  return mhc::ref::aggregate_backward(gy, x, pre, std::string(layout), acc);
}

std::tuple<Tensor, Tensor> aggregate_backward_cuda(const Tensor &gy,
                                                   const Tensor &x,
                                                   const Tensor &pre,
                                                   int64_t n, Str layout,
                                                   const OptTensor &acc) {
  Checker c = checkAggregateBackward(gy, x, pre, n, layout, acc);
  auto spec = withAcc(aggregateSpec(mhc::Direction::Backward, n, x, layout, c.C), acc);
  Tensor a = orUndefined(acc);
  auto *k = select("aggregate_backward", spec, {&x, &pre, &gy, &a}, c.M);
  if (!k)
    return mhc::ref::aggregate_backward(gy, x, pre, std::string(layout), acc);
  Tensor gx = emptyLike(x), gpre = emptyLike(pre);
  launch(*k, c.M, {{"gy", &gy}, {"x", &x}, {"pre", &pre}, {"acc", &a},
                   {"gx", &gx}, {"gpre", &gpre}},
         x);
  return {gx, gpre};
}

namespace {
Checker checkAggregateInto(const Tensor &gy, const Tensor &x, const Tensor &pre,
                           int64_t n, Str layout, const Tensor &buffer) {
  const char *op = "aggregate_backward_into";
  Checker c = checkAggregate(op, x, pre, n, layout);
  c.args({&gy, nullptr}, layout, /*first=*/2);
  checkBuffer(op, {"buffer", &buffer}, x, {{"gy", &gy}, {"x", &x}, {"pre", &pre}});
  return c;
}

/// buffer += own in the buffer's f32 (the reference); gpre.
Tensor aggregateIntoRef(const Tensor &gy, const Tensor &x, const Tensor &pre,
                        Str layout, const Tensor &buffer) {
  auto [sum, gpre] = mhc::ref::aggregate_backward(gy, x, pre, std::string(layout), buffer);
  buffer.copy_(sum);
  return gpre;
}
} // namespace

Tensor aggregate_backward_into_ref(const Tensor &gy, const Tensor &x, const Tensor &pre,
                                   int64_t n, Str layout, const Tensor &buffer) {
  checkAggregateInto(gy, x, pre, n, layout, buffer);
  return aggregateIntoRef(gy, x, pre, layout, buffer);
}

Tensor aggregate_backward_into_cuda(const Tensor &gy, const Tensor &x, const Tensor &pre,
                                    int64_t n, Str layout, const Tensor &buffer) {
  Checker c = checkAggregateInto(gy, x, pre, n, layout, buffer);
  auto spec = withBuffer(aggregateSpec(mhc::Direction::Backward, n, x, layout, c.C));
  auto *k = select("aggregate_backward_into", spec, {&x, &pre, &gy, &buffer}, c.M);
  if (!k)
    return aggregateIntoRef(gy, x, pre, layout, buffer);
  Tensor gpre = at::empty_like(pre);
  // In place: each thread reads an element of acc and then stores gx there.
  launch(*k, c.M, {{"gy", &gy}, {"x", &x}, {"pre", &pre}, {"acc", &buffer},
                   {"gx", &buffer}, {"gpre", &gpre}},
         x);
  return gpre;
}

} // namespace mhc::ops
