//===- PreBackwardOps.cpp - torch.ops.mhc.pre_backward --------------------===//
//
// The pre step's gradient from what pre_saved kept (h, ms, pre, logits):
// on CUDA one kernel spec (pre.bwd, codegen/kernels/PreBackward.cpp) where
// codegen has one (the flagship: aggregate's x gradient folded into the
// projection backward's main launch), else the four backward ops in turn,
// which is also the CPU path. acc, x's gradient from its other users, is
// x's dtype (acc=1) or TE's f32 buffer with 2-byte x (acc=f32), only read:
// gx = acc + aggregate's + project's, in the separate ops' order and bits.
//
//===----------------------------------------------------------------------===//

#include "OpEntries.h"

namespace mhc::ops {

namespace {

/// (gx, gphi, galpha, gbeta, gweight).
using PreGrads = std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor>;

/// The gradient's tensors, in the schema's order.
struct PreGradArgs {
  const Tensor &gy, &gpost, &gP, &x, &h, &ms, &pre, &logits, &phi, &alpha, &beta;
  const OptTensor &weight, &acc;
};

/// acc as TE's f32 buffer: f32 with 2-byte x (else acc has x's dtype).
bool isBuffer(const PreGradArgs &t) {
  return t.acc && t.acc->scalar_type() == at::kFloat &&
         (t.x.scalar_type() == at::kBFloat16 || t.x.scalar_type() == at::kHalf);
}

Checker checkPreGrad(const PreGradArgs &t, const PreAttrs &a) {
  const char *op = "pre_backward";
  checkLayout(op, a.layout);
  checkScale(op, a.normEps, a.preEps, a.postMult);
  checkSinkhorn(op, a.mode, a.iters, a.eps);
  Checker c(op, a.n);
  bool buffer = isBuffer(t);
  c.args({&t.x, &t.phi, t.weight ? &*t.weight : nullptr, &t.alpha, &t.beta,
          &t.gy, &t.gpost, &t.gP, &t.h, &t.ms, &t.pre, &t.logits,
          t.acc && !buffer ? &*t.acc : nullptr},
         a.layout);
  if (buffer)
    checkBuffer(op, {"acc", &*t.acc}, t.x, {});
  return c;
}

/// The entries the separate ops' path calls: the references on CPU, the
/// CUDA entries (kernel or reference) on CUDA.
struct GradSteps {
  AggregateBackwardSig *aggregateBackward;
  AggregateBackwardIntoSig *aggregateBackwardInto;
  SinkhornBackwardSig *sinkhornBackward;
  ScaleBackwardSig *scaleBackward;
  ProjectBackwardSig *projectBackward;
};
constexpr GradSteps kRefSteps{aggregate_backward_ref, aggregate_backward_into_ref,
                              sinkhorn_backward_ref, scale_backward_ref,
                              project_backward_ref};
constexpr GradSteps kCudaSteps{aggregate_backward_cuda, aggregate_backward_into_cuda,
                               sinkhorn_backward_cuda, scale_backward_cuda,
                               project_backward_cuda};

/// The four backward ops in turn (the Pre node's chain): aggregate's gx
/// (acc plus its own; with the f32 buffer, a copy of it plus its own in
/// f32) is project's acc.
PreGrads preGradSteps(const GradSteps &s, const PreGradArgs &t, const PreAttrs &a) {
  Tensor g1, gpre;
  if (isBuffer(t)) {
    g1 = t.acc->clone(); // (read, not written: the op's schema keeps acc)
    gpre = s.aggregateBackwardInto(t.gy, t.x, t.pre, a.n, a.layout, g1);
  } else {
    std::tie(g1, gpre) = s.aggregateBackward(t.gy, t.x, t.pre, a.n, a.layout, t.acc);
  }
  Tensor glogits = s.sinkhornBackward(t.gP, t.logits, a.n, a.mode, a.iters, a.eps);
  auto [gh, gms, galpha, gbeta] =
      s.scaleBackward(gpre, t.gpost, glogits, t.h, t.ms, t.alpha, t.beta, a.n,
                      a.normEps, a.preEps, a.postMult);
  auto [gx, gphi, gweight] = s.projectBackward(gh, gms, t.x, t.phi, t.weight, a.n,
                                               a.layout, a.tf32, g1);
  return {gx, gphi, galpha, gbeta, gweight};
}

/// pre.bwd for this call, or nullptr where the four ops run (parameters of
/// different dtypes, no such spec for these fields, or select() sends the
/// call to the reference).
const mhc::rt::LoadedKernel *preGradKernel(const PreGradArgs &t, const PreAttrs &a,
                                           const Checker &c) {
  bool oneParamType = t.phi.scalar_type() == t.alpha.scalar_type() &&
                      (!t.weight || t.weight->scalar_type() == t.phi.scalar_type());
  if (!oneParamType)
    return nullptr;
  auto spec = preSpec(a.n, t.x, a.layout, c.C, t.phi, t.weight, a.tf32, a.normEps,
                      a.preEps, a.postMult, a.mode, a.iters, a.eps);
  spec.dir = mhc::Direction::Backward;
  spec = withAcc(spec, t.acc);
  auto &rt = mhc::rt::Runtime::get();
  try {
    spec.arch = rt.archOf(t.x.get_device());
  } catch (const mhc::rt::Error &) {
    return nullptr; // (the separate ops' select() names the reason)
  }
  // Only the flagship has pre.bwd: elsewhere the separate ops, no warning.
  if (!mhc::unsupportedReason(spec).empty())
    return nullptr;
  Tensor w = orUndefined(t.weight), acc = orUndefined(t.acc);
  return select("pre_backward", spec,
                {&t.x, &t.gy, &t.gpost, &t.gP, &t.h, &t.ms, &t.pre, &t.logits,
                 &t.phi, &t.alpha, &t.beta, &w, &acc},
                c.M);
}

PreGrads preGradCuda(const PreGradArgs &t, const PreAttrs &a) {
  Checker c = checkPreGrad(t, a);
  const mhc::rt::LoadedKernel *k = preGradKernel(t, a, c);
  if (!k)
    return preGradSteps(kCudaSteps, t, a);
  Tensor w = orUndefined(t.weight), acc = orUndefined(t.acc);
  Tensor gx = emptyLike(t.x), gphi = emptyLike(t.phi);
  Tensor galpha = emptyLike(t.alpha), gbeta = emptyLike(t.beta);
  Tensor gweight = t.weight ? emptyLike(*t.weight) : emptyOf({0}, t.phi);
  launch(*k, c.M,
         {{"gy", &t.gy}, {"gpost", &t.gpost}, {"gP", &t.gP}, {"x", &t.x},
          {"h", &t.h}, {"ms", &t.ms}, {"pre", &t.pre}, {"logits", &t.logits},
          {"phi", &t.phi}, {"alpha", &t.alpha}, {"beta", &t.beta},
          {"weight", &w}, {"acc", &acc}, {"gx", &gx}, {"gphi", &gphi},
          {"galpha", &galpha}, {"gbeta", &gbeta}, {"gweight", &gweight}},
         t.x);
  return {gx, gphi, galpha, gbeta, gweight};
}

} // namespace

PreGrads pre_backward_ref(const Tensor &gy, const Tensor &gpost, const Tensor &gP,
                          const Tensor &x, const Tensor &h, const Tensor &ms,
                          const Tensor &pre, const Tensor &logits, const Tensor &phi,
                          const Tensor &alpha, const Tensor &beta,
                          const OptTensor &weight, const OptTensor &acc, int64_t n,
                          Str layout, bool tf32, double normEps, double preEps,
                          double postMult, Str mode, int64_t iters, double eps) {
  PreGradArgs t{gy, gpost, gP, x, h, ms, pre, logits, phi, alpha, beta, weight, acc};
  PreAttrs a{n, layout, tf32, normEps, preEps, postMult, mode, iters, eps};
  checkPreGrad(t, a);
  return preGradSteps(kRefSteps, t, a);
}

PreGrads pre_backward_cuda(const Tensor &gy, const Tensor &gpost, const Tensor &gP,
                           const Tensor &x, const Tensor &h, const Tensor &ms,
                           const Tensor &pre, const Tensor &logits, const Tensor &phi,
                           const Tensor &alpha, const Tensor &beta,
                           const OptTensor &weight, const OptTensor &acc, int64_t n,
                           Str layout, bool tf32, double normEps, double preEps,
                           double postMult, Str mode, int64_t iters, double eps) {
  return preGradCuda({gy, gpost, gP, x, h, ms, pre, logits, phi, alpha, beta, weight, acc},
                     {n, layout, tf32, normEps, preEps, postMult, mode, iters, eps});
}

} // namespace mhc::ops
