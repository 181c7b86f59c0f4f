//===- SeamOps.cpp - torch.ops.mhc.post_pre: the layer seam ---------------===//
//
// expand_combine of layer l, then the pre step of layer l+1, and its
// gradient (docs/design/seam.md; the operands and results in its contract's
// order). On CUDA one kernel spec each way (post_pre.fwd / .bwd) where
// codegen generates it and the pre step fuses (mhc::preStepFuses);
// otherwise, and on CPU, the existing ops one after the other.
//
//===----------------------------------------------------------------------===//

#include "OpEntries.h"

namespace mhc::ops {

namespace {

/// (x_next, h, ms, pre, post_next, logits, P_next, y), the contract's order.
using SeamOut = std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor, Tensor,
                           Tensor, Tensor>;
/// (gx, gf, gpost, gP, gbias, gphi, galpha, gbeta, gweight).
using SeamGrads = std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor, Tensor,
                             Tensor, Tensor, Tensor>;

/// The forward's tensors, in the contract's order.
struct SeamArgs {
  const Tensor &f, &post, &x, &P;
  const OptTensor &bias;
  const Tensor &phi, &alpha, &beta;
  const OptTensor &weight;
};

/// The backward's tensors, in the contract's order.
struct SeamGradArgs {
  const Tensor &gxNext, &gy, &gpostNext, &gPNext;
  const Tensor &f, &post, &x, &P;
  const OptTensor &bias;
  const Tensor &xNext, &h, &ms, &pre, &logits;
  const Tensor &phi, &alpha, &beta;
  const OptTensor &weight;
};

const Tensor *ptr(const OptTensor &t) { return t ? &*t : nullptr; }

/// Both forward ops check as "post_pre" (as pre_saved checks as "pre").
constexpr const char *kSeam = "post_pre";

void checkAttrs(const char *op, const PreAttrs &a) {
  checkLayout(op, a.layout);
  checkScale(op, a.normEps, a.preEps, a.postMult);
  checkSinkhorn(op, a.mode, a.iters, a.eps);
}

Checker checkSeam(const SeamArgs &t, const PreAttrs &a) {
  checkAttrs(kSeam, a);
  Checker c(kSeam, a.n);
  c.args({&t.f, &t.post, &t.x, &t.P, ptr(t.bias), &t.phi, &t.alpha, &t.beta,
          ptr(t.weight)},
         a.layout);
  return c;
}

Checker checkSeamGrad(const SeamGradArgs &t, const PreAttrs &a) {
  const char *op = "post_pre_backward";
  checkAttrs(op, a);
  Checker c(op, a.n);
  c.args({&t.gxNext, &t.gy, &t.gpostNext, &t.gPNext, &t.f, &t.post, &t.x, &t.P,
          ptr(t.bias), &t.xNext, &t.h, &t.ms, &t.pre, &t.logits, &t.phi,
          &t.alpha, &t.beta, ptr(t.weight)},
         a.layout);
  return c;
}

/// One kernel spec has one parameter dtype (bias, phi, alpha, beta,
/// weight); others run as the separate ops, each with its own kernel (the
/// rules already tie beta to alpha and weight to phi).
bool oneParamType(const Tensor &phi, const Tensor &alpha, const OptTensor &weight,
                  const OptTensor &bias) {
  at::ScalarType t = phi.scalar_type();
  return alpha.scalar_type() == t && (!weight || weight->scalar_type() == t) &&
         (!bias || bias->scalar_type() == t);
}

/// Whether the seam runs as its own kernel spec: the pre step fuses at M
/// tokens (the seam never fuses where the pre step would not) and codegen
/// generates `spec` for x's device. Otherwise the separate ops run, each
/// taking its kernel or warning for itself: this op adds no warning.
bool seamKernel(mhc::KernelSpec spec, const Tensor &x, int64_t M) {
  if (!mhc::preStepFuses(spec.n, M))
    return false;
  try {
    auto &rt = mhc::rt::Runtime::get();
    spec.arch = rt.archOf(x.get_device());
    if (rt.loadedKernel(spec, x.get_device()))
      return true; // (it was supported when it was loaded)
  } catch (const mhc::rt::Error &) {
    return false; // (the separate ops' select() names the reason)
  }
  return mhc::unsupportedReason(spec).empty();
}

/// The entries the separate-op paths call: the references on CPU, the CUDA
/// entries (kernel or reference) on CUDA.
struct Steps {
  ExpandCombineSig *combine;
  PreSig *pre;
  PreSavedSig *preSaved;
  AggregateBackwardSig *aggregateBackward;
  SinkhornBackwardSig *sinkhornBackward;
  ScaleBackwardSig *scaleBackward;
  ProjectBackwardSig *projectBackward;
  ExpandCombineBackwardSig *combineBackward;
};
constexpr Steps kRefSteps{
    expand_combine_ref,     pre_ref,               pre_saved_ref,
    aggregate_backward_ref, sinkhorn_backward_ref, scale_backward_ref,
    project_backward_ref,   expand_combine_backward_ref};
constexpr Steps kCudaSteps{
    expand_combine_cuda,     pre_cuda,               pre_saved_cuda,
    aggregate_backward_cuda, sinkhorn_backward_cuda, scale_backward_cuda,
    project_backward_cuda,   expand_combine_backward_cuda};

/// x_next = expand_combine(...), then the pre step of x_next; h, ms, pre
/// and logits only with `save` (else undefined).
SeamOut seamSteps(const Steps &s, const SeamArgs &t, const PreAttrs &a,
                  bool save) {
  Tensor xNext = s.combine(t.f, t.post, t.x, t.P, t.bias, a.n, a.layout);
  if (!save) {
    auto [y, postNext, PNext] =
        s.pre(xNext, t.phi, t.alpha, t.beta, t.weight, a.n, a.layout, a.tf32,
              a.normEps, a.preEps, a.postMult, a.mode, a.iters, a.eps);
    return {xNext, {}, {}, {}, postNext, {}, PNext, y};
  }
  auto [y, postNext, PNext, h, ms, pre, logits] =
      s.preSaved(xNext, t.phi, t.alpha, t.beta, t.weight, a.n, a.layout,
                 a.tf32, a.normEps, a.preEps, a.postMult, a.mode, a.iters, a.eps);
  return {xNext, h, ms, pre, postNext, logits, PNext, y};
}

/// The contract's value of the gradient, in the ops it replaces: x_next's
/// three contributions (its other users', aggregate's, project's) are summed
/// inside those ops through their `acc` (no n-stream add here).
SeamGrads seamGradSteps(const Steps &s, const SeamGradArgs &t, const PreAttrs &a) {
  auto [g1, gpre] =
      s.aggregateBackward(t.gy, t.xNext, t.pre, a.n, a.layout, t.gxNext);
  Tensor glogits =
      s.sinkhornBackward(t.gPNext, t.logits, a.n, a.mode, a.iters, a.eps);
  auto [gh, gms, galpha, gbeta] =
      s.scaleBackward(gpre, t.gpostNext, glogits, t.h, t.ms, t.alpha, t.beta,
                      a.n, a.normEps, a.preEps, a.postMult);
  auto [g, gphi, gweight] = s.projectBackward(gh, gms, t.xNext, t.phi, t.weight,
                                              a.n, a.layout, a.tf32, g1);
  g1.reset(); // its memory holds gx below: one n-stream tensor less at the peak
  auto [gf, gpost, gx, gP, gbias] = s.combineBackward(
      g, t.f, t.post, t.x, t.P, t.bias, a.n, a.layout, std::nullopt);
  return {gx, gf, gpost, gP, gbias, gphi, galpha, gbeta, gweight};
}

/// The seam's own kernel for this call, or nullptr where the separate ops
/// run (the parameters' dtypes differ, the pre step does not fuse at M, or
/// select() sends the call to the reference).
const mhc::rt::LoadedKernel *seamForwardKernel(const SeamArgs &t,
                                               const PreAttrs &a,
                                               const Checker &c) {
  if (!oneParamType(t.phi, t.alpha, t.weight, t.bias))
    return nullptr;
  auto spec = postPreSpec(mhc::Direction::Forward, a, t.x, c.C, t.phi,
                          t.weight, t.bias);
  if (!seamKernel(spec, t.x, c.M))
    return nullptr;
  Tensor b = orUndefined(t.bias), w = orUndefined(t.weight);
  return select("post_pre", spec,
                {&t.x, &t.f, &t.post, &t.P, &b, &t.phi, &t.alpha, &t.beta, &w},
                c.M);
}

/// Runs the seam's kernel into x_next and `o` (h, ms, pre and logits only
/// with `save`, else in the workspace).
void launchSeam(const mhc::rt::LoadedKernel &k, int64_t M, const SeamArgs &t,
                const Tensor &xNext, const PreStepOutputs &o, bool save) {
  Tensor b = orUndefined(t.bias), w = orUndefined(t.weight);
  auto kept = [&](const Tensor &v) { return save ? &v : nullptr; };
  launch(k, M,
         {{"f", &t.f}, {"post", &t.post}, {"x", &t.x}, {"P", &t.P},
          {"bias", &b}, {"phi", &t.phi}, {"alpha", &t.alpha},
          {"beta", &t.beta}, {"weight", &w}, {"x_next", &xNext},
          {"h", kept(o.h)}, {"ms", kept(o.ms)}, {"pre", kept(o.pre)},
          {"post_next", &o.post}, {"logits", kept(o.logits)},
          {"P_next", &o.P}, {"y", &o.y}},
         t.x);
}

/// The seam on CUDA; `save` keeps h, ms, pre and logits for the gradient
/// (else the kernel leaves them in the workspace, and the separate ops'
/// path computes them anyway).
SeamOut seamCuda(const SeamArgs &t, const PreAttrs &a, bool save) {
  Checker c = checkSeam(t, a);
  const mhc::rt::LoadedKernel *k = seamForwardKernel(t, a, c);
  if (!k)
    return seamSteps(kCudaSteps, t, a, save);
  Tensor xNext = at::empty_like(t.x);
  PreStepOutputs o = emptyPreStep(t.x, c.M, a.n, c.C, save);
  launchSeam(*k, c.M, t, xNext, o, save);
  return {xNext, o.h, o.ms, o.pre, o.post, o.logits, o.P, o.y};
}

/// post_pre_out's out= tensors, in its schema's order.
struct SeamOuts {
  const Tensor &xNext, &y, &postNext, &PNext;
};

/// The inputs' checks, then each out= tensor's: x_next like x, y [M, C] in
/// x's dtype, post_next [M, n] and P_next [M, n, n] in the mixing dtype.
Checker checkSeamOuts(const SeamArgs &t, const PreAttrs &a, const SeamOuts &o) {
  Checker c = checkSeam(t, a);
  const char *op = "post_pre_out";
  auto mixing = mhc::ref::mixingType(t.x.scalar_type());
  std::initializer_list<NamedTensor> in = {
      {"f", &t.f},         {"post", &t.post},   {"x", &t.x},
      {"P", &t.P},         {"bias", ptr(t.bias)}, {"phi", &t.phi},
      {"alpha", &t.alpha}, {"beta", &t.beta},   {"weight", ptr(t.weight)}};
  checkOut(op, {"x_next", &o.xNext}, t.x.sizes(), t.x.scalar_type(), t.x, in);
  checkOut(op, {"y", &o.y}, {c.M, c.C}, t.x.scalar_type(), t.x, in,
           {{"x_next", &o.xNext}});
  checkOut(op, {"post_next", &o.postNext}, {c.M, a.n}, mixing, t.x, in,
           {{"x_next", &o.xNext}, {"y", &o.y}});
  checkOut(op, {"P_next", &o.PNext}, {c.M, a.n, a.n}, mixing, t.x, in,
           {{"x_next", &o.xNext}, {"y", &o.y}, {"post_next", &o.postNext}});
  return c;
}

/// The separate ops' results (`steps`) copied into the out= tensors.
void copyInto(const SeamOuts &o, const SeamOut &r) {
  o.xNext.copy_(std::get<0>(r));
  o.y.copy_(std::get<7>(r));
  o.postNext.copy_(std::get<4>(r));
  o.PNext.copy_(std::get<6>(r));
}

/// post_pre's forward into `o`: the seam's kernel writes them where it
/// runs; otherwise the separate ops run and their results are copied.
void seamOutCuda(const SeamArgs &t, const PreAttrs &a, const SeamOuts &o) {
  Checker c = checkSeamOuts(t, a, o);
  const mhc::rt::LoadedKernel *k = seamForwardKernel(t, a, c);
  if (!k)
    return copyInto(o, seamSteps(kCudaSteps, t, a, /*save=*/false));
  launchSeam(*k, c.M, t, o.xNext, {o.y, o.postNext, o.PNext, {}, {}, {}, {}},
             /*save=*/false);
}

SeamGrads seamGradCuda(const SeamGradArgs &t, const PreAttrs &a) {
  Checker c = checkSeamGrad(t, a);
  int64_t M = c.M;
  Tensor b = orUndefined(t.bias), w = orUndefined(t.weight);
  const mhc::rt::LoadedKernel *k = nullptr;
  if (oneParamType(t.phi, t.alpha, t.weight, t.bias)) {
    auto spec = postPreSpec(mhc::Direction::Backward, a, t.x, c.C, t.phi,
                            t.weight, t.bias);
    if (seamKernel(spec, t.x, M))
      k = select("post_pre_backward", spec,
                 {&t.x, &t.gxNext, &t.gy, &t.gpostNext, &t.gPNext, &t.f,
                  &t.post, &t.P, &b, &t.xNext, &t.h, &t.ms, &t.pre, &t.logits,
                  &t.phi, &t.alpha, &t.beta, &w},
                 M);
  }
  if (!k)
    return seamGradSteps(kCudaSteps, t, a);
  Tensor gx = at::empty_like(t.x), gf = at::empty_like(t.f);
  Tensor gpost = at::empty_like(t.post), gP = at::empty_like(t.P);
  Tensor gbias = t.bias ? at::empty_like(*t.bias) : at::empty({0}, t.x.options());
  Tensor gphi = at::empty_like(t.phi), galpha = at::empty_like(t.alpha);
  Tensor gbeta = at::empty_like(t.beta);
  Tensor gweight =
      t.weight ? at::empty_like(*t.weight) : at::empty({0}, t.phi.options());
  launch(*k, M,
         {{"gx_next", &t.gxNext}, {"gy", &t.gy}, {"gpost_next", &t.gpostNext},
          {"gP_next", &t.gPNext}, {"f", &t.f}, {"post", &t.post}, {"x", &t.x},
          {"P", &t.P}, {"bias", &b}, {"x_next", &t.xNext}, {"h", &t.h},
          {"ms", &t.ms}, {"pre", &t.pre}, {"logits", &t.logits},
          {"phi", &t.phi}, {"alpha", &t.alpha}, {"beta", &t.beta},
          {"weight", &w}, {"gx", &gx}, {"gf", &gf}, {"gpost", &gpost},
          {"gP", &gP}, {"gbias", &gbias}, {"gphi", &gphi},
          {"galpha", &galpha}, {"gbeta", &gbeta}, {"gweight", &gweight}},
         t.x);
  return {gx, gf, gpost, gP, gbias, gphi, galpha, gbeta, gweight};
}

/// post_pre's four of the eight: (x_next, y, post_next, P_next).
std::tuple<Tensor, Tensor, Tensor, Tensor> visible(const SeamOut &o) {
  return {std::get<0>(o), std::get<7>(o), std::get<4>(o), std::get<6>(o)};
}

} // namespace

SeamOut post_pre_saved_ref(const Tensor &f, const Tensor &post, const Tensor &x,
                           const Tensor &P, const OptTensor &bias,
                           const Tensor &phi, const Tensor &alpha,
                           const Tensor &beta, const OptTensor &weight,
                           int64_t n, Str layout, bool tf32, double normEps,
                           double preEps, double postMult, Str mode,
                           int64_t iters, double eps) {
  SeamArgs t{f, post, x, P, bias, phi, alpha, beta, weight};
  PreAttrs a{n, layout, tf32, normEps, preEps, postMult, mode, iters, eps};
  checkSeam(t, a);
  return seamSteps(kRefSteps, t, a, /*save=*/true);
}

std::tuple<Tensor, Tensor, Tensor, Tensor>
post_pre_ref(const Tensor &f, const Tensor &post, const Tensor &x,
             const Tensor &P, const OptTensor &bias, const Tensor &phi,
             const Tensor &alpha, const Tensor &beta, const OptTensor &weight,
             int64_t n, Str layout, bool tf32, double normEps, double preEps,
             double postMult, Str mode, int64_t iters, double eps) {
  SeamArgs t{f, post, x, P, bias, phi, alpha, beta, weight};
  PreAttrs a{n, layout, tf32, normEps, preEps, postMult, mode, iters, eps};
  checkSeam(t, a);
  return visible(seamSteps(kRefSteps, t, a, /*save=*/false));
}

SeamOut post_pre_saved_cuda(const Tensor &f, const Tensor &post,
                            const Tensor &x, const Tensor &P,
                            const OptTensor &bias, const Tensor &phi,
                            const Tensor &alpha, const Tensor &beta,
                            const OptTensor &weight, int64_t n, Str layout,
                            bool tf32, double normEps, double preEps,
                            double postMult, Str mode, int64_t iters,
                            double eps) {
  return seamCuda({f, post, x, P, bias, phi, alpha, beta, weight},
                  {n, layout, tf32, normEps, preEps, postMult, mode, iters, eps},
                  /*save=*/true);
}

std::tuple<Tensor, Tensor, Tensor, Tensor>
post_pre_cuda(const Tensor &f, const Tensor &post, const Tensor &x,
              const Tensor &P, const OptTensor &bias, const Tensor &phi,
              const Tensor &alpha, const Tensor &beta, const OptTensor &weight,
              int64_t n, Str layout, bool tf32, double normEps, double preEps,
              double postMult, Str mode, int64_t iters, double eps) {
  return visible(seamCuda({f, post, x, P, bias, phi, alpha, beta, weight},
                          {n, layout, tf32, normEps, preEps, postMult, mode,
                           iters, eps},
                          /*save=*/false));
}

void post_pre_out_ref(const Tensor &f, const Tensor &post, const Tensor &x,
                      const Tensor &P, const OptTensor &bias, const Tensor &phi,
                      const Tensor &alpha, const Tensor &beta,
                      const OptTensor &weight, int64_t n, Str layout, bool tf32,
                      double normEps, double preEps, double postMult, Str mode,
                      int64_t iters, double eps, const Tensor &xNext,
                      const Tensor &y, const Tensor &postNext,
                      const Tensor &PNext) {
  SeamArgs t{f, post, x, P, bias, phi, alpha, beta, weight};
  PreAttrs a{n, layout, tf32, normEps, preEps, postMult, mode, iters, eps};
  SeamOuts o{xNext, y, postNext, PNext};
  checkSeamOuts(t, a, o);
  copyInto(o, seamSteps(kRefSteps, t, a, /*save=*/false));
}

void post_pre_out_cuda(const Tensor &f, const Tensor &post, const Tensor &x,
                       const Tensor &P, const OptTensor &bias, const Tensor &phi,
                       const Tensor &alpha, const Tensor &beta,
                       const OptTensor &weight, int64_t n, Str layout, bool tf32,
                       double normEps, double preEps, double postMult, Str mode,
                       int64_t iters, double eps, const Tensor &xNext,
                       const Tensor &y, const Tensor &postNext,
                       const Tensor &PNext) {
  seamOutCuda({f, post, x, P, bias, phi, alpha, beta, weight},
              {n, layout, tf32, normEps, preEps, postMult, mode, iters, eps},
              {xNext, y, postNext, PNext});
}

SeamGrads post_pre_backward_ref(
    const Tensor &gxNext, const Tensor &gy, const Tensor &gpostNext,
    const Tensor &gPNext, const Tensor &f, const Tensor &post, const Tensor &x,
    const Tensor &P, const OptTensor &bias, const Tensor &xNext,
    const Tensor &h, const Tensor &ms, const Tensor &pre, const Tensor &logits,
    const Tensor &phi, const Tensor &alpha, const Tensor &beta,
    const OptTensor &weight, int64_t n, Str layout, bool tf32, double normEps,
    double preEps, double postMult, Str mode, int64_t iters, double eps) {
  SeamGradArgs t{gxNext, gy,  gpostNext, gPNext, f,   post,  x,    P,    bias,
                 xNext,  h,   ms,        pre,    logits, phi, alpha, beta, weight};
  PreAttrs a{n, layout, tf32, normEps, preEps, postMult, mode, iters, eps};
  checkSeamGrad(t, a);
  return seamGradSteps(kRefSteps, t, a);
}

SeamGrads post_pre_backward_cuda(
    const Tensor &gxNext, const Tensor &gy, const Tensor &gpostNext,
    const Tensor &gPNext, const Tensor &f, const Tensor &post, const Tensor &x,
    const Tensor &P, const OptTensor &bias, const Tensor &xNext,
    const Tensor &h, const Tensor &ms, const Tensor &pre, const Tensor &logits,
    const Tensor &phi, const Tensor &alpha, const Tensor &beta,
    const OptTensor &weight, int64_t n, Str layout, bool tf32, double normEps,
    double preEps, double postMult, Str mode, int64_t iters, double eps) {
  return seamGradCuda({gxNext, gy, gpostNext, gPNext, f, post, x, P, bias,
                       xNext, h, ms, pre, logits, phi, alpha, beta, weight},
                      {n, layout, tf32, normEps, preEps, postMult, mode, iters,
                       eps});
}

} // namespace mhc::ops
