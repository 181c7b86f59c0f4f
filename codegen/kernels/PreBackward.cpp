//===- PreBackward.cpp - pre.bwd: the pre step's gradient -----------------===//
//
// The pre step's backward as one spec (docs/design/seam.md, "The pre step's
// backward"): the seam's backward without its post stage. Where the seam's
// fold applies (seam::backwardFuses: n = 4, bf16, f32 parameters, sm_90a,
// (C, n), lanes holding whole channels) aggregate runs as its gpre-only
// token pass and the projection backward's main launch forms aggregate's x
// gradient where it adds acc (BackwardMma.cpp); elsewhere the four backward
// kernels run in turn, aggregate's gx read back as project's acc. x's
// gradient from its other users is pre.bwd's own acc: none, acc=1, or TE's
// f32 buffer (acc=f32: project reads buffer + pre (x) gy, summed in f32).
// Both builds give the bits of the four torch ops in turn.
//
//===----------------------------------------------------------------------===//

#include "kernels/Kernels.h"
#include "kernels/project/Project.h"
#include "kernels/seam/Contract.h"

using namespace mlir;
using namespace mlir::mhc;
using ::mhc::BufferRole;
using ::mhc::DType;

/// gy, gpost, gP, x, h, ms, pre, logits, phi, alpha, beta, weight?, acc?;
/// then gx, gphi, galpha, gbeta, gweight?.
static void declarePreBackwardContract(Composition &c, const KernelContext &ctx) {
  const ::mhc::KernelSpec &s = ctx.spec;
  int64_t n = ctx.n(), N = ctx.N(), K = ctx.K();
  auto in = [&](const char *name, DType t, ::mhc::Extent e) {
    c.contract(name, t, BufferRole::Input, e);
  };
  auto out = [&](const char *name, DType t, ::mhc::Extent e) {
    c.contract(name, t, BufferRole::Output, e);
  };
  in("gy", s.act, {ctx.C(), 0});
  in("gpost", DType::F32, {n, 0});
  in("gP", DType::F32, {n * n, 0});
  in("x", s.act, {K, 0});
  in("h", DType::F32, {N, 0});
  in("ms", DType::F32, {1, 0});
  in("pre", DType::F32, {n, 0});
  in("logits", DType::F32, {n * n, 0});
  in("phi", s.param, {0, N * K});
  in("alpha", s.param, {0, 3});
  in("beta", s.param, {0, N});
  if (s.hasWeight)
    in("weight", s.param, {0, K});
  if (s.readsAcc())
    in("acc", s.accType(), {K, 0});
  out("gx", s.act, {K, 0});
  out("gphi", s.param, {0, N * K});
  out("galpha", s.param, {0, 3});
  out("gbeta", s.param, {0, N});
  if (s.hasWeight)
    out("gweight", s.param, {0, K});
}

/// Sinkhorn's and scale's gradients, the stages between aggregate and project.
static LogicalResult buildMiddle(Composition &c,
                                 ArrayRef<::mhc::KernelSpec> parts) {
  if (failed(c.stage(parts[1], {"sinkhorn", {}}, buildSinkhorn)))
    return failure();
  return c.stage(parts[2], {"scale", {}}, buildScale);
}

/// The four kernels in turn: aggregate's gx ("g1") is project's acc.
static LogicalResult buildComposed(KernelContext &ctx,
                                   ArrayRef<::mhc::KernelSpec> parts) {
  Composition c(ctx);
  declarePreBackwardContract(c, ctx);
  if (failed(c.stage(parts[0], {"aggregate", {{"gx", "g1"}}}, buildAggregate)) ||
      failed(buildMiddle(c, parts)) ||
      failed(c.stage(parts[3], {"project", {{"acc", "g1"}}}, buildProject)))
    return failure();
  return c.finish();
}

/// aggregate's gpre-only token pass, then project with aggregate's gx folded
/// in: its acc is pre.bwd's (none: a project spec without acc).
static LogicalResult buildFused(KernelContext &ctx,
                                ArrayRef<::mhc::KernelSpec> parts) {
  Composition c(ctx);
  declarePreBackwardContract(c, ctx);
  ::mhc::KernelSpec project = parts[3];
  project.acc = ctx.spec.acc;
  if (failed(c.stage(parts[0], {"aggregate", {}}, buildAggregateGradPre)) ||
      failed(buildMiddle(c, parts)) ||
      failed(c.stage(project, {"project", {}}, buildProjectBackwardFoldAggregate)))
    return failure();
  return c.finish();
}

LogicalResult mlir::mhc::buildPreBackward(KernelContext &ctx) {
  std::vector<::mhc::KernelSpec> parts = ::mhc::preBackwardParts(ctx.spec);
  assert(parts.size() == 4 && parts[0].op == ::mhc::OpKind::Aggregate &&
         parts[3].op == ::mhc::OpKind::Project);
  return seam::backwardFuses(ctx) ? buildFused(ctx, parts)
                                  : buildComposed(ctx, parts);
}
