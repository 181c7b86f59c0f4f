//===- Contract.cpp - the layer seam's buffers, in contract order ---------===//

#include "kernels/seam/Contract.h"

using namespace mlir;
using namespace mlir::mhc;
using ::mhc::BufferRole;
using ::mhc::DType;

namespace {
/// Declares buffers of one contract: activations and f32 per-token values
/// take M rows, parameters are fixed.
struct Declarer {
  Composition &c;
  const KernelContext &ctx;
  BufferRole role;
  void act(const char *name, int64_t perToken) const {
    c.contract(name, ctx.spec.act, role, {perToken, 0});
  }
  void f32(const char *name, int64_t perToken) const {
    c.contract(name, DType::F32, role, {perToken, 0});
  }
  void param(const char *name, int64_t elems) const {
    c.contract(name, ctx.spec.param, role, {0, elems});
  }
};
} // namespace

/// The operands of layer l's expand_combine: f, post, x, P, bias?.
static void declarePostOperands(const Declarer &in) {
  int64_t n = in.ctx.n();
  in.act("f", in.ctx.C());
  in.f32("post", n);
  in.act("x", in.ctx.K());
  in.f32("P", n * n);
  if (in.ctx.spec.hasBias)
    in.param("bias", in.ctx.C());
}

/// Layer l+1's pre-step parameters: phi, alpha, beta, weight? (`prefix`
/// "g" names their gradients).
static void declarePreParams(const Declarer &d, const std::string &prefix) {
  int64_t N = d.ctx.N(), K = d.ctx.K();
  d.param((prefix + "phi").c_str(), N * K);
  d.param((prefix + "alpha").c_str(), 3);
  d.param((prefix + "beta").c_str(), N);
  if (d.ctx.spec.hasWeight)
    d.param((prefix + "weight").c_str(), K);
}

void seam::declareForwardContract(Composition &c, const KernelContext &ctx) {
  Declarer in{c, ctx, BufferRole::Input}, out{c, ctx, BufferRole::Output};
  int64_t n = ctx.n();
  declarePostOperands(in);
  declarePreParams(in, "");
  out.act("x_next", ctx.K());
  out.f32("h", ctx.N());
  out.f32("ms", 1);
  out.f32("pre", n);
  out.f32("post_next", n);
  out.f32("logits", n * n);
  out.f32("P_next", n * n);
  out.act("y", ctx.C());
}

void seam::declareBackwardContract(Composition &c, const KernelContext &ctx) {
  Declarer in{c, ctx, BufferRole::Input}, out{c, ctx, BufferRole::Output};
  int64_t n = ctx.n();
  in.act("gx_next", ctx.K());
  in.act("gy", ctx.C());
  in.f32("gpost_next", n);
  in.f32("gP_next", n * n);
  declarePostOperands(in);
  in.act("x_next", ctx.K());
  in.f32("h", ctx.N());
  in.f32("ms", 1);
  in.f32("pre", n);
  in.f32("logits", n * n);
  declarePreParams(in, "");
  out.act("gx", ctx.K());
  out.act("gf", ctx.C());
  out.f32("gpost", n);
  out.f32("gP", n * n);
  if (ctx.spec.hasBias)
    out.param("gbias", ctx.C());
  declarePreParams(out, "g");
}

std::vector<::mhc::KernelSpec> seam::backwardParts(const KernelContext &ctx) {
  std::vector<::mhc::KernelSpec> parts = ::mhc::postPreParts(ctx.spec);
  assert(parts.size() == 5 && parts[0].op == ::mhc::OpKind::Aggregate &&
         parts[1].op == ::mhc::OpKind::Sinkhorn &&
         parts[2].op == ::mhc::OpKind::Scale &&
         parts[3].op == ::mhc::OpKind::Project &&
         parts[4].op == ::mhc::OpKind::ExpandCombine);
  return parts;
}
