//===- Autograd.cpp - autograd of torch.ops.mhc.* in C++ -------------------===//
//
// The backward of each forward op is its *_backward op. Registered at the
// Autograd key in C++ so a call never enters Python (a Python autograd
// registration would run on every call, grad or not). Missing upstream
// gradients become zeros; upstream gradients are made contiguous. The
// *_backward ops have no gradient: differentiating one (double backward)
// raises a clear error. The layer seam's node is in AutogradSeam.cpp.
//
//===----------------------------------------------------------------------===//

#include "AutogradUtil.h"
#include "Reference.h"

#include "mhc/Support/OpContract.h"

#include <torch/library.h>

using namespace mhc::ops;

namespace {

struct Project : torch::autograd::Function<Project> {
  static variable_list forward(AutogradContext *ctx, Tensor x, Tensor phi,
                               OptTensor weight, int64_t n, std::string layout,
                               bool tf32) {
    auto [h, ms] = belowAutograd(projectOp(), x, phi, weight, n, layout, tf32);
    ctx->save_for_backward({x, phi, weight.value_or(Tensor())});
    ctx->saved_data["n"] = n;
    ctx->saved_data["layout"] = layout;
    ctx->saved_data["tf32"] = tf32;
    return {h, ms};
  }
  static variable_list backward(AutogradContext *ctx, variable_list g) {
    auto s = ctx->get_saved_variables();
    int64_t n = ctx->saved_data["n"].toInt();
    std::string layout = ctx->saved_data["layout"].toStringRef();
    // Symbolic sizes: under torch.compile a dynamic M stays dynamic.
    c10::SymInt M = s[0].sym_size(0), N = mhc::numLogits(n);
    auto mixing = s[0].options().dtype(mhc::ref::mixingType(s[0].scalar_type()));
    Tensor gh = g[0].defined() ? g[0].contiguous() : at::zeros_symint({M, N}, mixing);
    Tensor gms = g[1].defined() ? g[1].contiguous() : at::zeros_symint({M}, mixing);
    auto [gx, gphi, gw] = projectBackwardOp().call(gh, gms, s[0], s[1], opt(s[2]), n, layout,
                                   ctx->saved_data["tf32"].toBool(), std::nullopt);
    return {gx, gphi, s[2].defined() ? gw : Tensor(), Tensor(), Tensor(), Tensor()};
  }
};

struct Scale : torch::autograd::Function<Scale> {
  static variable_list forward(AutogradContext *ctx, Tensor h, Tensor ms,
                               Tensor alpha, Tensor beta, int64_t n,
                               double normEps, double preEps, double postMult) {
    auto [pre, post, logits] = belowAutograd(scaleOp(), h, ms, alpha, beta, n,
                                             normEps, preEps, postMult);
    ctx->save_for_backward({h, ms, alpha, beta, pre, post, logits});
    ctx->saved_data["n"] = n;
    ctx->saved_data["eps"] = std::vector<double>{normEps, preEps, postMult};
    return {pre, post, logits};
  }
  static variable_list backward(AutogradContext *ctx, variable_list g) {
    auto s = ctx->get_saved_variables();
    auto e = ctx->saved_data["eps"].toDoubleVector();
    auto [gh, gms, galpha, gbeta] =
        scaleBackwardOp().call(grad(g[0], s[4]), grad(g[1], s[5]), grad(g[2], s[6]), s[0], s[1],
                 s[2], s[3], ctx->saved_data["n"].toInt(), e[0], e[1], e[2]);
    return {gh, gms, galpha, gbeta, Tensor(), Tensor(), Tensor(), Tensor()};
  }
};

struct Sinkhorn : torch::autograd::Function<Sinkhorn> {
  static Tensor forward(AutogradContext *ctx, Tensor logits, int64_t n,
                        std::string mode, int64_t iters, double eps) {
    Tensor P = belowAutograd(sinkhornOp(), logits, n, mode, iters, eps);
    ctx->save_for_backward({logits});
    ctx->saved_data["n"] = n;
    ctx->saved_data["mode"] = mode;
    ctx->saved_data["iters"] = iters;
    ctx->saved_data["eps"] = eps;
    return P;
  }
  static variable_list backward(AutogradContext *ctx, variable_list g) {
    Tensor logits = ctx->get_saved_variables()[0];
    Tensor gl = sinkhornBackwardOp().call(
        grad(g[0], logits), logits, ctx->saved_data["n"].toInt(),
        ctx->saved_data["mode"].toStringRef(), ctx->saved_data["iters"].toInt(),
        ctx->saved_data["eps"].toDouble());
    return {gl, Tensor(), Tensor(), Tensor(), Tensor()};
  }
};

struct Aggregate : torch::autograd::Function<Aggregate> {
  static Tensor forward(AutogradContext *ctx, Tensor x, Tensor pre, int64_t n,
                        std::string layout) {
    Tensor y = belowAutograd(aggregateOp(), x, pre, n, layout);
    ctx->save_for_backward({x, pre, y});
    ctx->saved_data["n"] = n;
    ctx->saved_data["layout"] = layout;
    return y;
  }
  static variable_list backward(AutogradContext *ctx, variable_list g) {
    auto s = ctx->get_saved_variables();
    auto [gx, gpre] = aggregateBackwardOp().call(grad(g[0], s[2]), s[0], s[1], ctx->saved_data["n"].toInt(),
                               ctx->saved_data["layout"].toStringRef(), std::nullopt);
    return {gx, gpre, Tensor(), Tensor()};
  }
};

struct ExpandCombine : torch::autograd::Function<ExpandCombine> {
  static Tensor forward(AutogradContext *ctx, Tensor f, Tensor post, Tensor x,
                        Tensor P, OptTensor bias, int64_t n, std::string layout) {
    Tensor out = belowAutograd(expandCombineOp(), f, post, x, P, bias, n, layout);
    ctx->save_for_backward({f, post, x, P, bias.value_or(Tensor())});
    ctx->saved_data["n"] = n;
    ctx->saved_data["layout"] = layout;
    return out;
  }
  static variable_list backward(AutogradContext *ctx, variable_list g) {
    auto s = ctx->get_saved_variables();
    auto [gf, gpost, gx, gP, gbias] =
        expandCombineBackwardOp().call(grad(g[0], s[2]), s[0], s[1], s[2], s[3], opt(s[4]),
                 ctx->saved_data["n"].toInt(), ctx->saved_data["layout"].toStringRef(),
                 std::nullopt);
    return {gf, gpost, gx, gP, s[4].defined() ? gbias : Tensor(), Tensor(), Tensor()};
  }
};

/// The pre step's gradient is the four ops' backward kernels in reverse:
/// the fused forward keeps what each of them needs (h, ms, pre, logits).
struct Pre : torch::autograd::Function<Pre> {
  static variable_list forward(AutogradContext *ctx, Tensor x, Tensor phi,
                               Tensor alpha, Tensor beta, OptTensor weight,
                               int64_t n, std::string layout, bool tf32,
                               double normEps, double preEps, double postMult,
                               std::string mode, int64_t iters, double eps) {
    auto [y, post, P, h, ms, pre, logits] =
        belowAutograd(preSavedOp(), x, phi, alpha, beta, weight, n, layout,
                      tf32, normEps, preEps, postMult, mode, iters, eps);
    // y and post are not kept: their missing gradients' zeros take the
    // shapes and dtypes of x's channels and of pre.
    ctx->save_for_backward({x, phi, alpha, beta, weight.value_or(Tensor()), h,
                            ms, pre, logits});
    saveAttrs(ctx, n, layout, tf32, normEps, preEps, postMult, mode, iters, eps);
    return {y, post, P};
  }
  static variable_list backward(AutogradContext *ctx, variable_list g) {
    auto s = ctx->get_saved_variables();
    const Tensor &x = s[0], &phi = s[1], &alpha = s[2], &beta = s[3], &w = s[4];
    const Tensor &h = s[5], &ms = s[6], &pre = s[7], &logits = s[8];
    PreAttrs a = savedAttrs(ctx);
    Tensor gy = g[0].defined()
                    ? g[0].contiguous()
                    : at::zeros_symint({x.sym_size(0),
                                        x.sym_size(a.layout == "nc" ? 2 : 1)},
                                       x.options());
    auto [gxAggregate, gpre] =
        aggregateBackwardOp().call(gy, x, pre, a.n, a.layout, std::nullopt);
    Tensor glogits = sinkhornBackwardOp().call(grad(g[2], logits), logits, a.n,
                                               a.mode, a.iters, a.eps);
    auto [gh, gms, galpha, gbeta] =
        scaleBackwardOp().call(gpre, grad(g[1], pre), glogits, h, ms, alpha,
                               beta, a.n, a.normEps, a.preEps, a.postMult);
    // x's gradient: project's with aggregate's added where the kernel
    // stores it (acc), the bits of gxProject.add(gxAggregate).
    auto [gx, gphi, gw] = projectBackwardOp().call(
        gh, gms, x, phi, opt(w), a.n, a.layout, a.tf32, gxAggregate);
    return {gx, gphi, galpha, gbeta,
            w.defined() ? gw : Tensor(), Tensor(), Tensor(), Tensor(), Tensor(),
            Tensor(), Tensor(), Tensor(), Tensor(), Tensor()};
  }
};

std::tuple<Tensor, Tensor, Tensor>
preAutograd(const Tensor &x, const Tensor &phi, const Tensor &alpha,
            const Tensor &beta, const OptTensor &weight, int64_t n, Str layout,
            bool tf32, double normEps, double preEps, double postMult, Str mode,
            int64_t iters, double eps) {
  const Tensor none;
  if (noGraph({&x, &phi, &alpha, &beta, weight ? &*weight : &none}))
    return belowAutograd(preOp(), x, phi, alpha, beta, weight, n, layout, tf32,
                         normEps, preEps, postMult, mode, iters, eps);
  auto out = Pre::apply(x, phi, alpha, beta, weight, n, std::string(layout),
                        tf32, normEps, preEps, postMult, std::string(mode),
                        iters, eps);
  return {out[0], out[1], out[2]};
}

/// pre_saved is the forward half of Pre (called below autograd there); a
/// direct call records no graph: its outputs do not require grad.
std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor>
preSavedAutograd(const Tensor &x, const Tensor &phi, const Tensor &alpha,
                 const Tensor &beta, const OptTensor &weight, int64_t n,
                 Str layout, bool tf32, double normEps, double preEps,
                 double postMult, Str mode, int64_t iters, double eps) {
  return belowAutograd(preSavedOp(), x, phi, alpha, beta, weight, n, layout,
                       tf32, normEps, preEps, postMult, mode, iters, eps);
}

std::tuple<Tensor, Tensor> projectAutograd(const Tensor &x, const Tensor &phi,
                                           const OptTensor &weight, int64_t n,
                                           Str layout, bool tf32) {
  const Tensor none;
  if (noGraph({&x, &phi, weight ? &*weight : &none})) {
    return belowAutograd(projectOp(), x, phi, weight, n, layout, tf32);
  }
  auto out = Project::apply(x, phi, weight, n, std::string(layout), tf32);
  return {out[0], out[1]};
}

std::tuple<Tensor, Tensor, Tensor> scaleAutograd(const Tensor &h, const Tensor &ms,
                                                 const Tensor &alpha, const Tensor &beta,
                                                 int64_t n, double normEps,
                                                 double preEps, double postMult) {
  if (noGraph({&h, &ms, &alpha, &beta})) {
    return belowAutograd(scaleOp(), h, ms, alpha, beta, n, normEps, preEps, postMult);
  }
  auto out = Scale::apply(h, ms, alpha, beta, n, normEps, preEps, postMult);
  return {out[0], out[1], out[2]};
}

Tensor sinkhornAutograd(const Tensor &logits, int64_t n, Str mode, int64_t iters,
                        double eps) {
  if (noGraph({&logits})) {
    return belowAutograd(sinkhornOp(), logits, n, mode, iters, eps);
  }
  return Sinkhorn::apply(logits, n, std::string(mode), iters, eps);
}

Tensor aggregateAutograd(const Tensor &x, const Tensor &pre, int64_t n, Str layout) {
  if (noGraph({&x, &pre})) {
    return belowAutograd(aggregateOp(), x, pre, n, layout);
  }
  return Aggregate::apply(x, pre, n, std::string(layout));
}

Tensor expandCombineAutograd(const Tensor &f, const Tensor &post, const Tensor &x,
                             const Tensor &P, const OptTensor &bias, int64_t n,
                             Str layout) {
  const Tensor none;
  if (noGraph({&f, &post, &x, &P, bias ? &*bias : &none})) {
    return belowAutograd(expandCombineOp(), f, post, x, P, bias, n, layout);
  }
  return ExpandCombine::apply(f, post, x, P, bias, n, std::string(layout));
}

std::tuple<Tensor, Tensor, Tensor>
projectBackwardAutograd(const Tensor &gh, const Tensor &gms, const Tensor &x,
                        const Tensor &phi, const OptTensor &weight, int64_t n,
                        Str layout, bool tf32, const OptTensor &acc) {
  return firstOrderOnly("project", projectBackwardOp(), gh, gms, x, phi, weight, n,
                        layout, tf32, acc);
}

std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor>
preBackwardAutograd(const Tensor &gy, const Tensor &gpost, const Tensor &gP,
                    const Tensor &x, const Tensor &h, const Tensor &ms,
                    const Tensor &pre, const Tensor &logits, const Tensor &phi,
                    const Tensor &alpha, const Tensor &beta, const OptTensor &weight,
                    const OptTensor &acc, int64_t n, Str layout, bool tf32,
                    double normEps, double preEps, double postMult, Str mode,
                    int64_t iters, double eps) {
  return firstOrderOnly("pre", preBackwardOp(), gy, gpost, gP, x, h, ms, pre,
                        logits, phi, alpha, beta, weight, acc, n, layout, tf32,
                        normEps, preEps, postMult, mode, iters, eps);
}

std::tuple<Tensor, Tensor, Tensor, Tensor>
scaleBackwardAutograd(const Tensor &gpre, const Tensor &gpost, const Tensor &glogits,
                      const Tensor &h, const Tensor &ms, const Tensor &alpha,
                      const Tensor &beta, int64_t n, double normEps, double preEps,
                      double postMult) {
  return firstOrderOnly("scale", scaleBackwardOp(), gpre, gpost, glogits, h, ms,
                        alpha, beta, n, normEps, preEps, postMult);
}

Tensor sinkhornBackwardAutograd(const Tensor &gP, const Tensor &logits, int64_t n,
                                Str mode, int64_t iters, double eps) {
  return firstOrderOnly("sinkhorn", sinkhornBackwardOp(), gP, logits, n, mode, iters,
                        eps);
}

std::tuple<Tensor, Tensor> aggregateBackwardAutograd(const Tensor &gy, const Tensor &x,
                                                     const Tensor &pre, int64_t n,
                                                     Str layout, const OptTensor &acc) {
  return firstOrderOnly("aggregate", aggregateBackwardOp(), gy, x, pre, n, layout,
                        acc);
}

std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor>
expandCombineBackwardAutograd(const Tensor &gout, const Tensor &f, const Tensor &post,
                              const Tensor &x, const Tensor &P, const OptTensor &bias,
                              int64_t n, Str layout, const OptTensor &acc) {
  return firstOrderOnly("expand_combine", expandCombineBackwardOp(), gout, f, post,
                        x, P, bias, n, layout, acc);
}

} // namespace

TORCH_LIBRARY_IMPL(mhc, Autograd, m) {
  m.impl("project_backward", &projectBackwardAutograd);
  m.impl("scale_backward", &scaleBackwardAutograd);
  m.impl("sinkhorn_backward", &sinkhornBackwardAutograd);
  m.impl("aggregate_backward", &aggregateBackwardAutograd);
  m.impl("expand_combine_backward", &expandCombineBackwardAutograd);
  m.impl("project", &projectAutograd);
  m.impl("scale", &scaleAutograd);
  m.impl("sinkhorn", &sinkhornAutograd);
  m.impl("aggregate", &aggregateAutograd);
  m.impl("expand_combine", &expandCombineAutograd);
  m.impl("pre", &preAutograd);
  m.impl("pre_saved", &preSavedAutograd);
  m.impl("pre_backward", &preBackwardAutograd);
}
