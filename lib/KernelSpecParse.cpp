//===- KernelSpecParse.cpp - a spec from its canonical text ---------------===//
//
// KernelSpec::parse: `op.dir;key=value;...` into a spec, every field
// checked, the text required to be canonical where asked.
//
//===----------------------------------------------------------------------===//

#include "mhc/Support/KernelSpec.h"
#include "mhc/Support/KernelLimits.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>

namespace mhc {

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

} // namespace mhc
