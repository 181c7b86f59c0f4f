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

/// The fused kernel for this call (three launches instead of six), or
/// nullptr where the four ops run.
const mhc::rt::LoadedKernel *preKernel(const Checker &c, const Tensor &x,
                                       const Tensor &phi, const Tensor &alpha,
                                       const Tensor &beta, const OptTensor &weight,
                                       int64_t n, Str layout, bool tf32,
                                       double normEps, double preEps,
                                       double postMult, Str mode, int64_t iters,
                                       double eps) {
  // One kernel spec has one parameter dtype: phi, alpha, beta and weight
  // of different dtypes run as the four ops (each has its own kernel).
  bool oneParamType = phi.scalar_type() == beta.scalar_type() &&
                      (!weight || weight->scalar_type() == phi.scalar_type());
  if (!oneParamType || !mhc::preStepFuses(n, c.M))
    return nullptr;
  auto spec = preSpec(n, x, layout, c.C, phi, weight, tf32, normEps, preEps,
                      postMult, mode, iters, eps);
  Tensor w = orUndefined(weight);
  return select("pre", spec, {&x, &phi, &w, &alpha, &beta}, c.M);
}

/// Runs the fused kernel into `o` (h, ms, pre and logits only with `save`,
/// else in the workspace).
void launchPre(const mhc::rt::LoadedKernel &k, int64_t M, const Tensor &x,
               const Tensor &phi, const Tensor &alpha, const Tensor &beta,
               const OptTensor &weight, const PreStepOutputs &o, bool save) {
  Tensor w = orUndefined(weight);
  auto kept = [&](const Tensor &t) { return save ? &t : nullptr; };
  launch(k, M, {{"x", &x}, {"phi", &phi}, {"weight", &w}, {"alpha", &alpha},
                {"beta", &beta}, {"h", kept(o.h)}, {"ms", kept(o.ms)},
                {"pre", kept(o.pre)}, {"post", &o.post},
                {"logits", kept(o.logits)}, {"P", &o.P}, {"y", &o.y}},
         x);
}

/// The fused kernel where it applies, else the four ops; `save` keeps h,
/// ms, pre and logits for the gradient, else they stay in the workspace.
PreOut preCuda(const Tensor &x, const Tensor &phi, const Tensor &alpha,
               const Tensor &beta, const OptTensor &weight, int64_t n,
               Str layout, bool tf32, double normEps, double preEps,
               double postMult, Str mode, int64_t iters, double eps, bool save) {
  Checker c = checkPre(x, phi, alpha, beta, weight, n, layout, normEps, preEps,
                       postMult, mode, iters, eps);
  const mhc::rt::LoadedKernel *k =
      preKernel(c, x, phi, alpha, beta, weight, n, layout, tf32, normEps,
                preEps, postMult, mode, iters, eps);
  if (!k)
    return preSteps(project_cuda, scale_cuda, sinkhorn_cuda, aggregate_cuda, x,
                    phi, alpha, beta, weight, n, layout, tf32, normEps, preEps,
                    postMult, mode, iters, eps);
  PreStepOutputs o = emptyPreStep(x, c.M, n, c.C, save);
  launchPre(*k, c.M, x, phi, alpha, beta, weight, o, save);
  return {o.y, o.post, o.P, o.h, o.ms, o.pre, o.logits};
}

/// pre_out's checks: the inputs', then y [M, C] in x's dtype, post [M, n]
/// and P [M, n, n] in the mixing dtype.
Checker checkPreOuts(const Tensor &x, const Tensor &phi, const Tensor &alpha,
                     const Tensor &beta, const OptTensor &weight, int64_t n,
                     Str layout, double normEps, double preEps,
                     double postMult, Str mode, int64_t iters, double eps,
                     const Tensor &y, const Tensor &post, const Tensor &P) {
  Checker c = checkPre(x, phi, alpha, beta, weight, n, layout, normEps, preEps,
                       postMult, mode, iters, eps);
  const char *op = "pre_out";
  auto mixing = mhc::ref::mixingType(x.scalar_type());
  std::initializer_list<NamedTensor> in = {
      {"x", &x}, {"phi", &phi}, {"alpha", &alpha}, {"beta", &beta},
      {"weight", weight ? &*weight : nullptr}};
  checkOut(op, {"y", &y}, {c.M, c.C}, x.scalar_type(), x, in);
  checkOut(op, {"post", &post}, {c.M, n}, mixing, x, in, {{"y", &y}});
  checkOut(op, {"P", &P}, {c.M, n, n}, mixing, x, in, {{"y", &y}, {"post", &post}});
  return c;
}

void copyInto(const Tensor &y, const Tensor &post, const Tensor &P,
              const PreOut &r) {
  y.copy_(std::get<0>(r));
  post.copy_(std::get<1>(r));
  P.copy_(std::get<2>(r));
}

} // namespace

PreStepOutputs emptyPreStep(const Tensor &x, int64_t M, int64_t n, int64_t C,
                            bool save) {
  auto mixing = x.options().dtype(mhc::ref::mixingType(x.scalar_type()));
  PreStepOutputs o;
  o.y = at::empty({M, C}, x.options());
  o.post = at::empty({M, n}, mixing);
  o.P = at::empty({M, n, n}, mixing);
  if (save) {
    o.h = at::empty({M, mhc::numLogits(n)}, mixing);
    o.ms = at::empty({M}, mixing);
    o.pre = at::empty({M, n}, mixing);
    o.logits = at::empty({M, n, n}, mixing);
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

namespace mhc::ops {

void pre_out_ref(const Tensor &x, const Tensor &phi, const Tensor &alpha,
                 const Tensor &beta, const OptTensor &weight, int64_t n,
                 Str layout, bool tf32, double normEps, double preEps,
                 double postMult, Str mode, int64_t iters, double eps,
                 const Tensor &y, const Tensor &post, const Tensor &P) {
  checkPreOuts(x, phi, alpha, beta, weight, n, layout, normEps, preEps,
               postMult, mode, iters, eps, y, post, P);
  copyInto(y, post, P,
           preSteps(project_ref, scale_ref, sinkhorn_ref, aggregate_ref, x, phi,
                    alpha, beta, weight, n, layout, tf32, normEps, preEps,
                    postMult, mode, iters, eps));
}

/// The fused kernel writes y, post and P where it runs; otherwise the four
/// ops run and their results are copied.
void pre_out_cuda(const Tensor &x, const Tensor &phi, const Tensor &alpha,
                  const Tensor &beta, const OptTensor &weight, int64_t n,
                  Str layout, bool tf32, double normEps, double preEps,
                  double postMult, Str mode, int64_t iters, double eps,
                  const Tensor &y, const Tensor &post, const Tensor &P) {
  Checker c = checkPreOuts(x, phi, alpha, beta, weight, n, layout, normEps,
                           preEps, postMult, mode, iters, eps, y, post, P);
  const mhc::rt::LoadedKernel *k =
      preKernel(c, x, phi, alpha, beta, weight, n, layout, tf32, normEps,
                preEps, postMult, mode, iters, eps);
  if (!k)
    return copyInto(y, post, P,
                    preSteps(project_cuda, scale_cuda, sinkhorn_cuda,
                             aggregate_cuda, x, phi, alpha, beta, weight, n,
                             layout, tf32, normEps, preEps, postMult, mode,
                             iters, eps));
  launchPre(*k, c.M, x, phi, alpha, beta, weight, {y, post, P, {}, {}, {}, {}},
            /*save=*/false);
}

} // namespace mhc::ops
