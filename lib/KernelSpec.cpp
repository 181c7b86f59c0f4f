//===- KernelSpec.cpp - canonical kernel identity -------------------------===//

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

static std::string formatFloat(float v) {
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

namespace {
template <typename E>
bool parseEnum(const std::string &v, std::initializer_list<E> all, E &out) {
  for (E e : all)
    if (v == toString(e)) {
      out = e;
      return true;
    }
  return false;
}

bool parseInt(const std::string &v, int64_t &out) {
  if (v.empty())
    return false;
  char *end = nullptr;
  errno = 0;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (*end != '\0' || errno == ERANGE)
    return false;
  out = x;
  return true;
}

bool parseFloat(const std::string &v, float &out) {
  if (v.empty())
    return false;
  char *end = nullptr;
  out = std::strtof(v.c_str(), &end);
  return *end == '\0';
}

bool parseBool(const std::string &v, bool &out) {
  if (v != "0" && v != "1")
    return false;
  out = v == "1";
  return true;
}
} // namespace

std::optional<KernelSpec> KernelSpec::parse(std::string_view text,
                                            std::string *error) {
  auto fail = [&](const std::string &msg) -> std::optional<KernelSpec> {
    if (error)
      *error = msg;
    return std::nullopt;
  };
  std::vector<std::string> fields;
  size_t start = 0;
  while (true) {
    size_t semi = text.find(';', start);
    fields.emplace_back(text.substr(start, semi - start));
    if (semi == std::string_view::npos)
      break;
    start = semi + 1;
  }
  KernelSpec spec;
  const std::string &head = fields.front();
  size_t dot = head.rfind('.');
  if (dot == std::string::npos)
    return fail("expected '<op>.<fwd|bwd>' at the start, got '" + head + "'");
  if (!parseEnum(head.substr(0, dot),
                 {OpKind::Project, OpKind::Scale, OpKind::Sinkhorn,
                  OpKind::Aggregate, OpKind::ExpandCombine, OpKind::Pre,
                  OpKind::PostPre},
                 spec.op))
    return fail("unknown op '" + head.substr(0, dot) + "'");
  if (!parseEnum(head.substr(dot + 1), {Direction::Forward, Direction::Backward},
                 spec.dir))
    return fail("unknown direction '" + head.substr(dot + 1) + "'");

  std::map<std::string, std::string> kv;
  for (size_t i = 1; i < fields.size(); ++i) {
    size_t eq = fields[i].find('=');
    if (eq == std::string::npos)
      return fail("expected key=value, got '" + fields[i] + "'");
    if (!kv.emplace(fields[i].substr(0, eq), fields[i].substr(eq + 1)).second)
      return fail("duplicate key '" + fields[i].substr(0, eq) + "'");
  }
  auto take = [&](const char *key, std::string &out) {
    auto it = kv.find(key);
    if (it == kv.end())
      return false;
    out = it->second;
    kv.erase(it);
    return true;
  };
  std::string v;
  bool ok = true;
  if (take("n", v)) ok &= parseInt(v, spec.n);
  if (take("act", v)) ok &= parseEnum(v, {DType::BF16, DType::F16, DType::F32}, spec.act);
  if (take("param", v)) ok &= parseEnum(v, {DType::BF16, DType::F16, DType::F32}, spec.param);
  if (take("layout", v)) ok &= parseEnum(v, {Layout::NC, Layout::CN}, spec.layout);
  if (take("C", v)) ok &= parseInt(v, spec.channels);
  if (take("tf32", v)) ok &= parseBool(v, spec.tf32);
  if (take("weight", v)) ok &= parseBool(v, spec.hasWeight);
  if (take("bias", v)) ok &= parseBool(v, spec.hasBias);
  if (take("acc", v)) {
    spec.accF32 = v == "f32";
    ok &= spec.accF32 || parseBool(v, spec.acc);
  }
  if (take("coop", v)) ok &= parseBool(v, spec.cooperative);
  if (take("norm_eps", v)) ok &= parseFloat(v, spec.normEps);
  if (take("pre_eps", v)) ok &= parseFloat(v, spec.preEps);
  if (take("post_mult", v)) ok &= parseFloat(v, spec.postMult);
  if (take("mode", v)) ok &= parseEnum(v, {SinkhornMode::Log, SinkhornMode::SoftmaxEps}, spec.mode);
  if (take("iters", v)) ok &= parseInt(v, spec.iters);
  if (take("eps", v)) ok &= parseFloat(v, spec.eps);
  if (take("arch", v)) spec.arch = v;
  if (!ok)
    return fail("malformed value in '" + std::string(text) + "'");
  if (!kv.empty())
    return fail("unknown key '" + kv.begin()->first + "'");
  // Only a string in canonical form names a kernel: reject anything else so
  // two spellings of one spec never become two cache entries.
  if (spec.canonical() != text)
    return fail("not in canonical form; expected '" + spec.canonical() + "'");
  std::string invalid = invalidReason(spec);
  if (!invalid.empty())
    return fail(invalid);
  return spec;
}

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
