//===- KernelSpec.cpp - canonical kernel identity -------------------------===//
//
// A spec's names, canonical text and hashes, and the arch facts it is
// built for; parsing is in KernelSpecParse.cpp, the rules of what is valid
// and what codegen serves in KernelSpecRules.cpp.
//
//===----------------------------------------------------------------------===//

#include "mhc/Support/KernelSpec.h"
#include "mhc/Support/KernelLimits.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <vector>

namespace mhc {

const char *toString(OpKind k) {
  switch (k) {
  case OpKind::Project: return "project";
  case OpKind::Scale: return "scale";
  case OpKind::Sinkhorn: return "sinkhorn";
  case OpKind::Aggregate: return "aggregate";
  case OpKind::ExpandCombine: return "expand_combine";
  case OpKind::Pre: return "pre";
  case OpKind::PostPre: return "post_pre";
  }
  return "?";
}
const char *toString(Direction d) { return d == Direction::Forward ? "fwd" : "bwd"; }
const char *toString(DType t) {
  switch (t) {
  case DType::BF16: return "bf16";
  case DType::F16: return "f16";
  case DType::F32: return "f32";
  }
  return "?";
}
const char *toString(Layout l) { return l == Layout::NC ? "nc" : "cn"; }
const char *toString(SinkhornMode m) {
  return m == SinkhornMode::Log ? "log" : "softmax_eps";
}
unsigned byteWidth(DType t) { return t == DType::F32 ? 4 : 2; }

bool isSupportedArch(std::string_view arch) {
  return arch == "sm_80" || arch == "sm_90a" || arch == "sm_100a";
}

int64_t flagshipSMs(std::string_view arch) {
  if (arch == "sm_80")
    return 108;
  if (arch == "sm_100a")
    return 148;
  return 132;
}

int64_t oneLaunchBlocks(const KernelSpec &s) {
  return std::max<int64_t>(1, std::min<int64_t>(flagshipSMs(s.arch), s.channels));
}

int64_t oneLaunchSliceBytes(const KernelSpec &s) {
  int64_t G = oneLaunchBlocks(s);
  return 4 * s.n * ((s.channels + G - 1) / G);
}

bool KernelSpec::usesActivations() const {
  return op == OpKind::Project || op == OpKind::Aggregate ||
         op == OpKind::ExpandCombine || op == OpKind::Pre ||
         op == OpKind::PostPre;
}
bool KernelSpec::usesParams() const {
  return usesProjectFields() || op == OpKind::Scale ||
         (op == OpKind::ExpandCombine && hasBias);
}
bool KernelSpec::usesProjectFields() const {
  return op == OpKind::Project || op == OpKind::Pre || op == OpKind::PostPre;
}
bool KernelSpec::usesScaleFields() const {
  return op == OpKind::Scale || op == OpKind::Pre || op == OpKind::PostPre;
}
bool KernelSpec::usesSinkhornFields() const {
  return op == OpKind::Sinkhorn || op == OpKind::Pre || op == OpKind::PostPre;
}
bool KernelSpec::usesBias() const {
  return op == OpKind::ExpandCombine || op == OpKind::PostPre;
}
bool KernelSpec::acceptsAcc() const {
  return dir == Direction::Backward &&
         (op == OpKind::Aggregate || op == OpKind::Project ||
          op == OpKind::ExpandCombine || op == OpKind::Pre);
}

bool KernelSpec::acceptsCooperative() const {
  return dir == Direction::Forward &&
         (op == OpKind::Pre || op == OpKind::PostPre);
}

bool KernelSpec::readsAcc() const {
  return acc || (accF32 && op != OpKind::ExpandCombine);
}

std::string formatFloat(float v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(v));
  return buf;
}

std::string KernelSpec::canonical() const {
  std::string s = std::string(toString(op)) + "." + toString(dir);
  auto add = [&](const char *key, const std::string &value) {
    s += ";";
    s += key;
    s += "=";
    s += value;
  };
  add("n", std::to_string(n));
  if (usesActivations())
    add("act", toString(act));
  if (usesParams())
    add("param", toString(param));
  if (usesLayout()) {
    add("layout", toString(layout));
    add("C", std::to_string(channels));
  }
  bool project = usesProjectFields();
  bool scale = usesScaleFields();
  bool sinkhorn = usesSinkhornFields();
  if (project) {
    add("tf32", tf32 ? "1" : "0");
    add("weight", hasWeight ? "1" : "0");
  }
  if (scale) {
    add("norm_eps", formatFloat(normEps));
    add("pre_eps", formatFloat(preEps));
    add("post_mult", formatFloat(postMult));
  }
  if (sinkhorn) {
    add("mode", toString(mode));
    add("iters", std::to_string(iters));
    if (mode == SinkhornMode::SoftmaxEps)
      add("eps", formatFloat(eps));
  }
  if (usesBias())
    add("bias", hasBias ? "1" : "0");
  if (accF32)
    add("acc", "f32");
  else if (acc)
    add("acc", "1");
  if (cooperative)
    add("coop", "1");
  add("arch", arch);
  return s;
}

uint64_t KernelSpec::hash() const {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : canonical()) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

std::string KernelSpec::kernelName() const {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016llx",
                static_cast<unsigned long long>(hash()));
  return std::string("mhc_") + toString(op) + "_" + toString(dir) + "_n" +
         std::to_string(n) + "_" + buf;
}

uint64_t KernelSpec::structuralHash() const {
  uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&](uint64_t v) {
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  };
  auto bits = [](float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return static_cast<uint64_t>(u);
  };
  mix(static_cast<uint64_t>(op));
  mix(static_cast<uint64_t>(dir));
  mix(static_cast<uint64_t>(n));
  mix(static_cast<uint64_t>(act));
  mix(static_cast<uint64_t>(param));
  mix(static_cast<uint64_t>(layout));
  mix(static_cast<uint64_t>(channels));
  mix((tf32 ? 1u : 0u) | (hasWeight ? 2u : 0u) | (hasBias ? 4u : 0u) |
      (acc ? 8u : 0u) | (cooperative ? 16u : 0u) | (accF32 ? 32u : 0u));
  mix(bits(normEps));
  mix(bits(preEps));
  mix(bits(postMult));
  mix(static_cast<uint64_t>(mode));
  mix(static_cast<uint64_t>(iters));
  mix(bits(eps));
  for (char c : arch)
    mix(static_cast<unsigned char>(c));
  return h;
}

bool operator==(const KernelSpec &a, const KernelSpec &b) {
  return a.canonical() == b.canonical();
}

} // namespace mhc
