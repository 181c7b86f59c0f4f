//===- Reference.cpp - MATH.md in ATen, the fallback path -----------------===//

#include "Reference.h"

namespace mhc::ref {

namespace {
at::ScalarType computeType(const Tensor &t) { return mixingType(t.scalar_type()); }
Tensor up(const Tensor &t, at::ScalarType type) { return t.to(type); }
/// x as [M, n, C] whatever its layout.
Tensor streams(const Tensor &x, const std::string &layout) {
  return layout == "nc" ? x : x.transpose(1, 2);
}
Tensor fromStreams(const Tensor &s, const std::string &layout) {
  return (layout == "nc" ? s : s.transpose(1, 2)).contiguous();
}
/// gx: the op's own gradient of x (`own`, in the compute type), plus acc
/// when given: rounded to x's dtype, then added (acc=1). An acc of another
/// dtype than x's is TE's f32 buffer (acc=f32): own + acc in acc's dtype,
/// rounded to x's dtype only where `toX` (the projection's result).
Tensor plusAcc(const Tensor &own, at::ScalarType xType, const OptTensor &acc,
               bool toX) {
  if (acc && acc->scalar_type() != xType) {
    Tensor sum = own.to(acc->scalar_type()).add(*acc);
    return toX ? sum.to(xType) : sum;
  }
  return acc ? own.to(xType).add(*acc) : own.to(xType);
}
Tensor segments(const Tensor &alpha, int64_t n, at::ScalarType type) {
  Tensor a = up(alpha, type);
  return at::cat({a[0].expand({n}), a[1].expand({n}), a[2].expand({n * n})});
}
} // namespace

std::tuple<Tensor, Tensor> project(const Tensor &x, const Tensor &phi,
                                   const OptTensor &weight) {
  auto type = computeType(x);
  int64_t M = x.size(0), K = x.size(1) * x.size(2); // (M may be 0)
  Tensor xv = up(x, type).reshape({M, K});
  Tensor xw = weight ? xv * up(*weight, type) : xv;
  Tensor h = at::matmul(xw, up(phi, type).t());
  Tensor ms = (xv * xv).mean(-1);
  return {h, ms};
}

std::tuple<Tensor, Tensor, Tensor> project_backward(
    const Tensor &gh, const Tensor &gms, const Tensor &x, const Tensor &phi,
    const OptTensor &weight, const OptTensor &acc) {
  auto type = computeType(x);
  int64_t M = x.size(0), K = x.size(1) * x.size(2);
  Tensor xv = up(x, type).reshape({M, K});
  Tensor g = up(gh, type);
  Tensor d = at::matmul(g, up(phi, type)); // [M, K]
  Tensor w = weight ? up(*weight, type) : Tensor();
  Tensor gx = (weight ? d * w : d) + (2.0 / K) * up(gms, type).unsqueeze(1) * xv;
  Tensor xw = weight ? xv * w : xv;
  Tensor gphi = at::matmul(g.t(), xw);
  Tensor gw = weight ? (d * xv).sum(0).to(weight->scalar_type())
                     : at::empty({0}, phi.options());
  return {plusAcc(gx.reshape(x.sizes()), x.scalar_type(), acc, /*toX=*/true),
          gphi.to(phi.scalar_type()), gw};
}

std::tuple<Tensor, Tensor, Tensor> scale(const Tensor &h, const Tensor &ms,
                                         const Tensor &alpha,
                                         const Tensor &beta, int64_t n,
                                         double normEps, double preEps,
                                         double postMult) {
  auto type = computeType(h);
  Tensor r = at::rsqrt(up(ms, type) + normEps);
  Tensor z = segments(alpha, n, type) * up(h, type) * r.unsqueeze(1) + up(beta, type);
  Tensor pre = at::sigmoid(z.narrow(1, 0, n)) + preEps;
  Tensor post = postMult * at::sigmoid(z.narrow(1, n, n));
  Tensor logits = z.narrow(1, 2 * n, n * n).reshape({-1, n, n}).contiguous();
  return {pre.contiguous(), post.contiguous(), logits};
}

std::tuple<Tensor, Tensor, Tensor, Tensor> scale_backward(
    const Tensor &gpre, const Tensor &gpost, const Tensor &glogits,
    const Tensor &h, const Tensor &ms, const Tensor &alpha, const Tensor &beta,
    int64_t n, double normEps, double preEps, double postMult) {
  auto type = computeType(h);
  int64_t M = h.size(0);
  Tensor hh = up(h, type);
  Tensor r = at::rsqrt(up(ms, type) + normEps).unsqueeze(1);
  Tensor a = segments(alpha, n, type);
  Tensor z = a * hh * r + up(beta, type);
  Tensor s = at::sigmoid(z.narrow(1, 0, n));
  Tensor post = postMult * at::sigmoid(z.narrow(1, n, n));
  Tensor gz = at::cat({up(gpre, type) * s * (1 - s),
                       up(gpost, type) * post * (1 - post / postMult),
                       up(glogits, type).reshape({M, n * n})},
                      1);
  Tensor gh = gz * a * r;
  Tensor gms = -0.5 * r.squeeze(1).pow(3) * (gz * a * hh).sum(1);
  Tensor t = gz * hh * r; // galpha's terms
  Tensor galpha = at::stack({t.narrow(1, 0, n).sum(), t.narrow(1, n, n).sum(),
                             t.narrow(1, 2 * n, n * n).sum()});
  Tensor gbeta = gz.sum(0);
  return {gh, gms, galpha.to(alpha.scalar_type()), gbeta.to(beta.scalar_type())};
}

Tensor sinkhorn(const Tensor &logits, const std::string &mode, int64_t iters,
                double eps) {
  Tensor L = up(logits, computeType(logits));
  if (mode == "log") {
    Tensor f = at::zeros_like(L.select(-1, 0));
    Tensor g = at::zeros_like(L.select(-2, 0));
    for (int64_t t = 0; t < iters; ++t) {
      f = -at::logsumexp(L + g.unsqueeze(-2), -1);
      g = -at::logsumexp(L + f.unsqueeze(-1), -2);
    }
    return at::exp(f.unsqueeze(-1) + L + g.unsqueeze(-2)).contiguous();
  }
  Tensor P = at::softmax(L, -1) + eps;
  P = P / (P.sum(-2, true) + eps);
  for (int64_t t = 1; t < iters; ++t) {
    P = P / (P.sum(-1, true) + eps);
    P = P / (P.sum(-2, true) + eps);
  }
  return P.contiguous();
}

Tensor sinkhorn_backward(const Tensor &gP, const Tensor &logits,
                         const std::string &mode, int64_t iters, double eps) {
  Tensor L = up(logits, computeType(logits));
  Tensor G = up(gP, L.scalar_type());
  if (mode == "log") {
    std::vector<Tensor> fs, gs;
    Tensor g = at::zeros_like(L.select(-2, 0));
    for (int64_t t = 0; t < iters; ++t) {
      Tensor f = -at::logsumexp(L + g.unsqueeze(-2), -1);
      g = -at::logsumexp(L + f.unsqueeze(-1), -2);
      fs.push_back(f);
      gs.push_back(g);
    }
    Tensor P = at::exp(fs.back().unsqueeze(-1) + L + gs.back().unsqueeze(-2));
    Tensor gL = G * P;
    Tensor gf = gL.sum(-1), gg = gL.sum(-2);
    for (int64_t t = iters - 1; t >= 0; --t) {
      Tensor A = at::exp(L + fs[t].unsqueeze(-1) + gs[t].unsqueeze(-2));
      Tensor d = gg.unsqueeze(-2) * A;
      gL = gL - d;
      gf = gf - d.sum(-1);
      Tensor gPrev = t > 0 ? gs[t - 1] : at::zeros_like(gg);
      Tensor B = at::exp(L + gPrev.unsqueeze(-2) + fs[t].unsqueeze(-1));
      Tensor d2 = gf.unsqueeze(-1) * B;
      gL = gL - d2;
      gg = -d2.sum(-2);
      gf = at::zeros_like(gf);
    }
    return gL.contiguous();
  }
  // softmax_eps: keep every normalisation's input and sums, then walk back
  // with gx = (gy - sum(gy * y)) / (s + eps) along the normalised axis.
  struct Step {
    Tensor y, s;
    int64_t dim;
  };
  std::vector<Step> steps;
  Tensor S = at::softmax(L, -1);
  Tensor P = S + eps;
  auto normalise = [&](int64_t dim) {
    Tensor s = P.sum(dim, true);
    P = P / (s + eps);
    steps.push_back({P, s, dim});
  };
  normalise(-2);
  for (int64_t t = 1; t < iters; ++t) {
    normalise(-1);
    normalise(-2);
  }
  for (auto it = steps.rbegin(); it != steps.rend(); ++it)
    G = (G - (G * it->y).sum(it->dim, true)) / (it->s + eps);
  return ((G - (G * S).sum(-1, true)) * S).contiguous();
}

Tensor aggregate(const Tensor &x, const Tensor &pre, const std::string &layout) {
  auto type = computeType(x);
  Tensor y = at::einsum("mi,mic->mc", {up(pre, type), streams(up(x, type), layout)});
  return y.to(x.scalar_type());
}

std::tuple<Tensor, Tensor> aggregate_backward(const Tensor &gy,
                                              const Tensor &x,
                                              const Tensor &pre,
                                              const std::string &layout,
                                              const OptTensor &acc) {
  auto type = computeType(x);
  Tensor g = up(gy, type), p = up(pre, type);
  Tensor gx = fromStreams(p.unsqueeze(2) * g.unsqueeze(1), layout);
  Tensor gpre = at::einsum("mc,mic->mi", {g, streams(up(x, type), layout)});
  return {plusAcc(gx, x.scalar_type(), acc, /*toX=*/false), gpre.to(pre.scalar_type())};
}

Tensor expand_combine(const Tensor &f, const Tensor &post, const Tensor &x,
                      const Tensor &P, const OptTensor &bias,
                      const std::string &layout) {
  auto type = computeType(x);
  Tensor fb = up(f, type);
  if (bias)
    fb = fb + up(*bias, type);
  Tensor out = up(post, type).unsqueeze(2) * fb.unsqueeze(1) +
               at::einsum("mij,mic->mjc", {up(P, type), streams(up(x, type), layout)});
  return fromStreams(out, layout).to(x.scalar_type());
}

std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor> expand_combine_backward(
    const Tensor &gout, const Tensor &f, const Tensor &post, const Tensor &x,
    const Tensor &P, const OptTensor &bias, const std::string &layout,
    const OptTensor &acc) {
  auto type = computeType(x);
  Tensor g = streams(up(gout, type), layout);
  Tensor fb = up(f, type);
  if (bias)
    fb = fb + up(*bias, type);
  Tensor gf = at::einsum("mj,mjc->mc", {up(post, type), g});
  Tensor gpost = at::einsum("mc,mjc->mj", {fb, g});
  Tensor gP = at::einsum("mic,mjc->mij", {streams(up(x, type), layout), g});
  Tensor gx = fromStreams(at::einsum("mij,mjc->mic", {up(P, type), g}), layout);
  Tensor gbias = bias ? gf.sum(0).to(bias->scalar_type())
                      : at::empty({0}, x.options());
  return {gf.to(f.scalar_type()), gpost.to(post.scalar_type()),
          plusAcc(gx, x.scalar_type(), acc, /*toX=*/false), gP.to(P.scalar_type()), gbias};
}

} // namespace mhc::ref
