//===- KernelSpecRules.cpp - which specs are valid and served -------------===//
//
// invalidReason (a spec that cannot exist), unsupportedReason (one codegen
// does not build), and the specs a composed spec runs as parts.
//
//===----------------------------------------------------------------------===//

#include "mhc/Support/KernelSpec.h"
#include "mhc/Support/KernelLimits.h"

#include <cmath>
#include <cstdio>
#include <vector>

namespace mhc {

namespace {
std::string outOfRange(const char *field, int64_t value, int64_t lo,
                       int64_t hi) {
  if (value >= lo && value <= hi)
    return "";
  return std::string(field) + " = " + std::to_string(value) +
         " is outside the valid range " + std::to_string(lo) + ".." +
         std::to_string(hi);
}

std::string badFloat(const char *field, float value, bool zeroAllowed) {
  if (std::isfinite(value) && (value > 0 || (zeroAllowed && value == 0)))
    return "";
  return std::string(field) + " = " + formatFloat(value) + " must be finite and " +
         (zeroAllowed ? ">= 0" : "> 0");
}
} // namespace

std::string invalidReason(const KernelSpec &s) {
  std::string r = outOfRange("n", s.n, 1, kMaxStreams);
  if (r.empty() && s.usesLayout())
    r = outOfRange("C", s.channels, 0, kMaxChannels);
  bool scale = s.usesScaleFields();
  bool sinkhorn = s.usesSinkhornFields();
  if (r.empty() && (s.acc || s.accF32) && !s.acceptsAcc())
    r = std::string("acc is only a field of the backward of aggregate, "
                    "project, expand_combine and pre, not of ") +
        toString(s.op) + "." + toString(s.dir);
  if (r.empty() && s.cooperative && !s.acceptsCooperative())
    r = std::string("coop is only a field of the forward of pre and "
                    "post_pre, not of ") +
        toString(s.op) + "." + toString(s.dir);
  if (r.empty() && s.accF32 && s.acc)
    r = "acc=1 and acc=f32 exclude each other";
  if (r.empty() && s.accF32 && byteWidth(s.act) != 2)
    r = std::string("acc=f32 is for 2-byte activations; with ") + toString(s.act) +
        " ones the buffer is acc=1's (or, for expand_combine, gx itself)";
  if (r.empty() && sinkhorn)
    r = outOfRange("iters", s.iters, 1, kMaxSinkhornIters);
  if (r.empty() && sinkhorn && s.mode == SinkhornMode::SoftmaxEps)
    r = badFloat("eps", s.eps, /*zeroAllowed=*/true);
  if (r.empty() && scale)
    r = badFloat("norm_eps", s.normEps, true);
  if (r.empty() && scale)
    r = badFloat("pre_eps", s.preEps, true);
  if (r.empty() && scale)
    r = badFloat("post_mult", s.postMult, false);
  return r;
}

std::string unsupportedReason(const KernelSpec &s) {
  // Within the hard bounds every product below fits int64 with room to spare.
  std::string invalid = invalidReason(s);
  if (!invalid.empty())
    return invalid;
  if (s.n < 1 || s.n > 8)
    return "n = " + std::to_string(s.n) + " is outside the specialised range 1..8";
  if (!isSupportedArch(s.arch))
    return "arch '" + s.arch + "' is not a codegen target (sm_80, sm_90a, sm_100a)";
  if (s.usesLayout() && s.channels <= 0)
    return "the channel count C is not static";
  if (s.usesParams() && s.param == DType::F16)
    return "f16 parameters are not supported (f32 or bf16)";
  if (s.op == OpKind::Pre && s.dir == Direction::Backward &&
      !foldsAggregateGrad(s))
    return "the pre step's backward kernel is the flagship's (n = 4, bf16 "
           "activations, f32 parameters, sm_90a, layout cn); elsewhere its "
           "gradient is the four ops' backward kernels";
  if (s.op == OpKind::Pre && s.dir == Direction::Backward)
    for (const KernelSpec &part : preBackwardParts(s)) {
      std::string why = unsupportedReason(part);
      if (!why.empty())
        return std::string("the pre step's part ") + toString(part.op) + "." +
               toString(part.dir) + ": " + why;
    }
  if (s.op == OpKind::PostPre)
    for (const KernelSpec &part : postPreParts(s)) {
      std::string why = unsupportedReason(part);
      if (!why.empty())
        return std::string("the seam's part ") + toString(part.op) + "." +
               toString(part.dir) + ": " + why;
    }
  if (s.cooperative && oneLaunchSliceBytes(s) > kOneLaunchMaxSliceBytes)
    return "the one-launch forward keeps a token's x_next slice of " +
           std::to_string(oneLaunchSliceBytes(s)) +
           " bytes in shared memory; at most " +
           std::to_string(kOneLaunchMaxSliceBytes);
  if (s.op == OpKind::Sinkhorn && s.dir == Direction::Backward) {
    int64_t floats = sinkhornHistoryFloats(s);
    int64_t most = kSinkhornHistoryBytes / (4 * 32);
    if (floats > most)
      return "sinkhorn backward keeps " + std::to_string(floats) +
             " floats of history per token; at most " + std::to_string(most) +
             " fit";
  }
  return "";
}

std::vector<KernelSpec> postPreParts(const KernelSpec &seam) {
  auto part = [&](OpKind op, bool acc) {
    KernelSpec p = seam;
    p.op = op;
    p.acc = acc;
    p.cooperative = false; // the parts are the multi-launch path's
    p.accF32 = false;
    return p;
  };
  if (seam.dir == Direction::Forward)
    return {part(OpKind::ExpandCombine, false), part(OpKind::Pre, false)};
  return {part(OpKind::Aggregate, true), part(OpKind::Sinkhorn, false),
          part(OpKind::Scale, false), part(OpKind::Project, true),
          part(OpKind::ExpandCombine, false)};
}

bool foldsAggregateGrad(const KernelSpec &s) {
  return s.n == 4 && s.act == DType::BF16 && s.param == DType::F32 &&
         s.arch == "sm_90a" && s.layout == Layout::CN;
}

std::vector<KernelSpec> preBackwardParts(const KernelSpec &pre) {
  auto part = [&](OpKind op) {
    KernelSpec p = pre;
    p.op = op;
    p.acc = p.accF32 = false;
    return p;
  };
  KernelSpec aggregate = part(OpKind::Aggregate), project = part(OpKind::Project);
  aggregate.acc = pre.acc;
  aggregate.accF32 = project.accF32 = pre.accF32;
  project.acc = !pre.accF32; // aggregate's gx (acc=1), or the f32 buffer's sum
  return {aggregate, part(OpKind::Sinkhorn), part(OpKind::Scale), project};
}

int64_t sinkhornHistoryFloats(const KernelSpec &s) {
  return s.mode == SinkhornMode::Log ? 2 * s.n * s.iters
                                     : (2 * s.iters - 1) * s.n;
}

} // namespace mhc
