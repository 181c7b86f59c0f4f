//===- PreOps.cpp - torch.ops.mhc.pre: one layer's pre step in one call ---===//
//
// project -> scale -> sinkhorn -> aggregate: on CUDA one fused kernel where
// mhc::preStepFuses says so (the rule mhc-fuse-pre follows too), else the
// four ops one after the other, which is also the CPU path.
//
//===----------------------------------------------------------------------===//

#include "OpEntries.h"

namespace mhc::ops {

namespace {

using PreOut = std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor>;

Checker checkPre(const Tensor &x, const Tensor &phi, const Tensor &alpha,
                 const Tensor &beta, const OptTensor &weight, int64_t n,
                 Str layout, double normEps, double preEps, double postMult,
                 Str mode, int64_t iters, double eps) {
  Checker c = checkProject("pre", x, phi, weight, n, layout);
  checkScale("pre", normEps, preEps, postMult);
  checkSinkhorn("pre", mode, iters, eps);
  c.args({&alpha, &beta}, layout, /*first=*/3);
  return c;
}

/// The four ops one after the other (the CPU path, and CUDA cases the fused
/// kernel does not cover); (y, post, P, h, ms, pre, logits).
template <typename Project, typename Scale, typename Sinkhorn, typename Aggregate>
PreOut preSteps(Project project, Scale scale, Sinkhorn sinkhorn,
                Aggregate aggregate, const Tensor &x, const Tensor &phi,
                const Tensor &alpha, const Tensor &beta,
                const OptTensor &weight, int64_t n, Str layout, bool tf32,
                double normEps, double preEps, double postMult, Str mode,
                int64_t iters, double eps) {
  auto [h, ms] = project(x, phi, weight, n, layout, tf32);
  auto [pre, post, logits] =
      scale(h, ms, alpha, beta, n, normEps, preEps, postMult);
  Tensor P = sinkhorn(logits, n, mode, iters, eps);
  Tensor y = aggregate(x, pre, n, layout);
  return {y, post, P, h, ms, pre, logits};
}

std::tuple<Tensor, Tensor, Tensor> firstThree(const PreOut &out) {
  return {std::get<0>(out), std::get<1>(out), std::get<2>(out)};
}

/// The fused kernel (three launches instead of six) where it applies;
/// `save` keeps h, ms, pre and logits for the gradient, else they stay in
/// the workspace.
PreOut preCuda(const Tensor &x, const Tensor &phi, const Tensor &alpha,
               const Tensor &beta, const OptTensor &weight, int64_t n,
               Str layout, bool tf32, double normEps, double preEps,
               double postMult, Str mode, int64_t iters, double eps, bool save) {
  Checker c = checkPre(x, phi, alpha, beta, weight, n, layout, normEps, preEps,
                       postMult, mode, iters, eps);
  int64_t M = c.M;
  // One kernel spec has one parameter dtype: phi, alpha, beta and weight
  // of different dtypes run as the four ops (each has its own kernel).
  bool oneParamType = phi.scalar_type() == beta.scalar_type() &&
                      (!weight || weight->scalar_type() == phi.scalar_type());
  const mhc::rt::LoadedKernel *k = nullptr;
  Tensor w = orUndefined(weight);
  if (oneParamType && mhc::preStepFuses(n, M)) {
    auto spec = preSpec(n, x, layout, c.C, phi, weight, tf32, normEps, preEps,
                        postMult, mode, iters, eps);
    k = select("pre", spec, {&x, &phi, &w, &alpha, &beta}, M);
  }
  if (!k)
    return preSteps(project_cuda, scale_cuda, sinkhorn_cuda, aggregate_cuda, x,
                    phi, alpha, beta, weight, n, layout, tf32, normEps, preEps,
                    postMult, mode, iters, eps);
  auto [y, post, P, h, ms, pre, logits] = emptyPreStep(x, M, n, c.C, save);
  auto kept = [&](const Tensor &t) { return save ? &t : nullptr; };
  launch(*k, M, {{"x", &x}, {"phi", &phi}, {"weight", &w}, {"alpha", &alpha},
                 {"beta", &beta}, {"h", kept(h)}, {"ms", kept(ms)},
                 {"pre", kept(pre)}, {"post", &post}, {"logits", kept(logits)},
                 {"P", &P}, {"y", &y}},
         x);
  return {y, post, P, h, ms, pre, logits};
}

} // namespace

PreStepOutputs emptyPreStep(const Tensor &x, int64_t M, int64_t n, int64_t C,
                            bool save) {
  at::ScalarType mixing = mhc::ref::mixingType(x.scalar_type());
  PreStepOutputs o;
  o.y = emptyOf({M, C}, x);
  o.post = emptyOf({M, n}, mixing, x);
  o.P = emptyOf({M, n, n}, mixing, x);
  if (save) {
    o.h = emptyOf({M, mhc::numLogits(n)}, mixing, x);
    o.ms = emptyOf({M}, mixing, x);
    o.pre = emptyOf({M, n}, mixing, x);
    o.logits = emptyOf({M, n, n}, mixing, x);
  }
  return o;
}

PreOut pre_saved_ref(const Tensor &x, const Tensor &phi, const Tensor &alpha,
                     const Tensor &beta, const OptTensor &weight, int64_t n,
                     Str layout, bool tf32, double normEps, double preEps,
                     double postMult, Str mode, int64_t iters, double eps) {
  checkPre(x, phi, alpha, beta, weight, n, layout, normEps, preEps, postMult,
           mode, iters, eps);
  return preSteps(project_ref, scale_ref, sinkhorn_ref, aggregate_ref, x, phi,
                  alpha, beta, weight, n, layout, tf32, normEps, preEps,
                  postMult, mode, iters, eps);
}

std::tuple<Tensor, Tensor, Tensor>
pre_ref(const Tensor &x, const Tensor &phi, const Tensor &alpha,
        const Tensor &beta, const OptTensor &weight, int64_t n, Str layout,
        bool tf32, double normEps, double preEps, double postMult, Str mode,
        int64_t iters, double eps) {
  return firstThree(pre_saved_ref(x, phi, alpha, beta, weight, n, layout, tf32,
                                  normEps, preEps, postMult, mode, iters, eps));
}

PreOut pre_saved_cuda(const Tensor &x, const Tensor &phi, const Tensor &alpha,
                      const Tensor &beta, const OptTensor &weight, int64_t n,
                      Str layout, bool tf32, double normEps, double preEps,
                      double postMult, Str mode, int64_t iters, double eps) {
  return preCuda(x, phi, alpha, beta, weight, n, layout, tf32, normEps, preEps,
                 postMult, mode, iters, eps, /*save=*/true);
}

std::tuple<Tensor, Tensor, Tensor>
pre_cuda(const Tensor &x, const Tensor &phi, const Tensor &alpha,
         const Tensor &beta, const OptTensor &weight, int64_t n, Str layout,
         bool tf32, double normEps, double preEps, double postMult, Str mode,
         int64_t iters, double eps) {
  return firstThree(preCuda(x, phi, alpha, beta, weight, n, layout, tf32,
                            normEps, preEps, postMult, mode, iters, eps,
                            /*save=*/false));
}

} // namespace mhc::ops
