//===- Specs.cpp - the kernel spec of each torch op call ------------------===//

#include "Specs.h"

#include <cstdlib>

namespace mhc::ops {

std::optional<mhc::DType> dtypeOf(const Tensor &t) {
  switch (t.scalar_type()) {
  case at::kBFloat16: return mhc::DType::BF16;
  case at::kHalf: return mhc::DType::F16;
  case at::kFloat: return mhc::DType::F32;
  default: return std::nullopt;
  }
}

namespace {

mhc::KernelSpec baseSpec(mhc::OpKind op, mhc::Direction dir, int64_t n) {
  mhc::KernelSpec s;
  s.op = op;
  s.dir = dir;
  s.n = n;
  return s;
}

void streamsFields(mhc::KernelSpec &s, const Tensor &x, Str layout, int64_t C) {
  s.act = dtypeOf(x).value_or(mhc::DType::F32);
  s.layout = layout == "nc" ? mhc::Layout::NC : mhc::Layout::CN;
  s.channels = C;
}

void projectFields(mhc::KernelSpec &spec, const Tensor &x, Str layout, int64_t C,
                   const Tensor &phi, const OptTensor &weight, bool tf32) {
  streamsFields(spec, x, layout, C);
  spec.param = dtypeOf(phi).value_or(mhc::DType::F32);
  spec.tf32 = tf32;
  spec.hasWeight = weight.has_value();
}

void scaleFields(mhc::KernelSpec &spec, double normEps, double preEps, double postMult) {
  spec.normEps = static_cast<float>(normEps);
  spec.preEps = static_cast<float>(preEps);
  spec.postMult = static_cast<float>(postMult);
}

void sinkhornFields(mhc::KernelSpec &spec, Str mode, int64_t iters, double eps) {
  spec.mode = mode == "log" ? mhc::SinkhornMode::Log : mhc::SinkhornMode::SoftmaxEps;
  spec.iters = iters;
  spec.eps = static_cast<float>(eps);
}

} // namespace

mhc::KernelSpec projectSpec(mhc::Direction dir, int64_t n, const Tensor &x,
                            Str layout, int64_t C, const Tensor &phi,
                            const OptTensor &weight, bool tf32) {
  auto spec = baseSpec(mhc::OpKind::Project, dir, n);
  projectFields(spec, x, layout, C, phi, weight, tf32);
  return spec;
}

mhc::KernelSpec scaleSpec(mhc::Direction dir, int64_t n, const Tensor &beta,
                          double normEps, double preEps, double postMult) {
  auto spec = baseSpec(mhc::OpKind::Scale, dir, n);
  spec.param = dtypeOf(beta).value_or(mhc::DType::F32);
  scaleFields(spec, normEps, preEps, postMult);
  return spec;
}

mhc::KernelSpec sinkhornSpec(mhc::Direction dir, int64_t n, Str mode,
                             int64_t iters, double eps) {
  auto spec = baseSpec(mhc::OpKind::Sinkhorn, dir, n);
  sinkhornFields(spec, mode, iters, eps);
  return spec;
}

mhc::KernelSpec aggregateSpec(mhc::Direction dir, int64_t n, const Tensor &x,
                              Str layout, int64_t C) {
  auto spec = baseSpec(mhc::OpKind::Aggregate, dir, n);
  streamsFields(spec, x, layout, C);
  return spec;
}

mhc::KernelSpec combineSpec(mhc::Direction dir, int64_t n, const Tensor &x,
                            Str layout, int64_t C, const OptTensor &bias) {
  auto spec = baseSpec(mhc::OpKind::ExpandCombine, dir, n);
  streamsFields(spec, x, layout, C);
  spec.hasBias = bias.has_value();
  if (bias)
    spec.param = dtypeOf(*bias).value_or(mhc::DType::F32);
  return spec;
}

mhc::KernelSpec withAcc(mhc::KernelSpec spec, const OptTensor &acc) {
  spec.accF32 = acc && acc->scalar_type() == at::kFloat && mhc::byteWidth(spec.act) == 2;
  spec.acc = acc && !spec.accF32;
  return spec;
}

mhc::KernelSpec withBuffer(mhc::KernelSpec spec) {
  spec.accF32 = mhc::byteWidth(spec.act) == 2;
  spec.acc = !spec.accF32 && spec.op != mhc::OpKind::ExpandCombine;
  return spec;
}

mhc::KernelSpec preSpec(int64_t n, const Tensor &x, Str layout, int64_t C,
                        const Tensor &phi, const OptTensor &weight, bool tf32,
                        double normEps, double preEps, double postMult,
                        Str mode, int64_t iters, double eps) {
  auto spec = baseSpec(mhc::OpKind::Pre, mhc::Direction::Forward, n);
  projectFields(spec, x, layout, C, phi, weight, tf32);
  scaleFields(spec, normEps, preEps, postMult);
  sinkhornFields(spec, mode, iters, eps);
  return spec;
}

namespace {
/// The one-launch threshold, or MHC_ONE_LAUNCH_MAX_TOKENS where set: a
/// benchmark knob (bench/serve.py measures both paths at every M with it;
/// docs/design/serve.md), read once per process. mhc-specialize ignores it.
int64_t oneLaunchMaxTokens() {
  static const int64_t limit = [] {
    const char *v = std::getenv("MHC_ONE_LAUNCH_MAX_TOKENS");
    return v && *v ? std::atoll(v) : mhc::kOneLaunchMaxTokens;
  }();
  return limit;
}
} // namespace

mhc::KernelSpec forTokens(mhc::KernelSpec spec, int64_t M) {
  spec.cooperative = spec.acceptsCooperative() && M >= 1 && M <= oneLaunchMaxTokens();
  if (spec.cooperative && mhc::oneLaunchSliceBytes(spec) > mhc::kOneLaunchMaxSliceBytes)
    spec.cooperative = false; // (C past ~100K channels: the multi-launch path)
  return spec;
}

mhc::KernelSpec postPreSpec(mhc::Direction dir, const PreAttrs &a,
                            const Tensor &x, int64_t C, const Tensor &phi,
                            const OptTensor &weight, const OptTensor &bias) {
  auto spec = baseSpec(mhc::OpKind::PostPre, dir, a.n);
  projectFields(spec, x, a.layout, C, phi, weight, a.tf32);
  scaleFields(spec, a.normEps, a.preEps, a.postMult);
  sinkhornFields(spec, a.mode, a.iters, a.eps);
  spec.hasBias = bias.has_value();
  return spec;
}

} // namespace mhc::ops
