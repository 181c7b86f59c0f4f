//===- OpContract.cpp - each torch op's tensor arguments ------------------===//

#include "mhc/Support/OpContract.h"

#include <cmath>
#include <map>

namespace mhc {

int64_t streamsOfLogits(int64_t N) {
  // numLogits(n) = (n + 1)^2 - 1; the rounded root, confirmed exactly.
  if (N < numLogits(1))
    return 0;
  auto n = static_cast<int64_t>(std::llround(std::sqrt(double(N) + 1))) - 1;
  return numLogits(n) == N ? n : 0;
}

std::string_view symbolName(Sym s) {
  switch (s) {
  case Sym::M: return "M";
  case Sym::C: return "C";
  case Sym::n: return "n";
  case Sym::N: return "N";
  case Sym::K: return "K";
  case Sym::Three: return "3";
  }
  return "?";
}

namespace {

using E = ElemClass;

ArgRule streams(std::string_view name, std::string_view sameTypeAs = {}) {
  return {name, {}, {}, E::Activation, /*streams=*/true, false, sameTypeAs};
}
ArgRule tensor(std::string_view name, std::vector<Sym> dims, E elem,
               std::string_view sameTypeAs = {}) {
  return {name, std::move(dims), {}, elem, false, false, sameTypeAs};
}
ArgRule optional(ArgRule rule) {
  rule.optional = true;
  return rule;
}

std::vector<ArgRule> concat(std::vector<ArgRule> a, const std::vector<ArgRule> &b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::map<std::string_view, std::vector<ArgRule>> buildTable() {
  const ArgRule phi{"phi", {Sym::N, Sym::K}, "[N, K] = [2n + n^2, n*C]", E::Param};
  const std::vector<ArgRule> project{
      streams("x"), phi,
      optional(tensor("weight", {Sym::K}, E::Param, "phi"))};
  const std::vector<ArgRule> scale{
      tensor("h", {Sym::M, Sym::N}, E::Mixing),
      tensor("ms", {Sym::M}, E::Mixing),
      tensor("alpha", {Sym::Three}, E::Param),
      tensor("beta", {Sym::N}, E::Param, "alpha")};
  const ArgRule logits = tensor("logits", {Sym::M, Sym::n, Sym::n}, E::Mixing);
  const std::vector<ArgRule> aggregate{
      streams("x"), tensor("pre", {Sym::M, Sym::n}, E::Mixing)};
  // x's gradient from its other users, which a backward adds to its own
  // (docs/MATH.md, "Backward"): x's shape and dtype, optional.
  const ArgRule acc = optional(streams("acc", "x"));
  const std::vector<ArgRule> combine{
      streams("x"),
      tensor("f", {Sym::M, Sym::C}, E::Activation, "x"),
      tensor("post", {Sym::M, Sym::n}, E::Mixing),
      tensor("P", {Sym::M, Sym::n, Sym::n}, E::Mixing),
      optional(tensor("bias", {Sym::C}, E::Param))};
  // The layer seam (docs/design/seam.md, "The contract"): f first, so M and
  // C come from it and x, x_next must have its dtype; the next layer's
  // parameters as in pre.
  const ArgRule post = tensor("post", {Sym::M, Sym::n}, E::Mixing);
  const ArgRule P = tensor("P", {Sym::M, Sym::n, Sym::n}, E::Mixing);
  const ArgRule bias = optional(tensor("bias", {Sym::C}, E::Param));
  const std::vector<ArgRule> seamParams{project[1], scale[2], scale[3], project[2]};
  const std::vector<ArgRule> seam = concat(
      {tensor("f", {Sym::M, Sym::C}, E::Activation), post, streams("x", "f"), P, bias},
      seamParams);
  const std::vector<ArgRule> seamBackward = concat(
      {streams("gx_next"), tensor("gy", {Sym::M, Sym::C}, E::Activation, "gx_next"),
       tensor("gpost_next", {Sym::M, Sym::n}, E::Mixing),
       tensor("gP_next", {Sym::M, Sym::n, Sym::n}, E::Mixing),
       tensor("f", {Sym::M, Sym::C}, E::Activation, "gx_next"), post,
       streams("x", "gx_next"), P, bias, streams("x_next", "gx_next"),
       scale[0], scale[1], aggregate[1], logits},
      seamParams);
  return {
      {"post_pre", seam},
      {"post_pre_saved", seam},
      {"post_pre_backward", seamBackward},
      {"project", project},
      {"project_backward",
       concat(project, {tensor("gh", {Sym::M, Sym::N}, E::Mixing),
                        tensor("gms", {Sym::M}, E::Mixing), acc})},
      {"scale", scale},
      {"scale_backward",
       concat(scale, {tensor("gpre", {Sym::M, Sym::n}, E::Mixing),
                      tensor("gpost", {Sym::M, Sym::n}, E::Mixing),
                      tensor("glogits", {Sym::M, Sym::n, Sym::n}, E::Mixing)})},
      {"sinkhorn", {logits}},
      {"sinkhorn_backward",
       {tensor("gP", {Sym::M, Sym::n, Sym::n}, E::Mixing), logits}},
      {"aggregate", aggregate},
      {"aggregate_backward",
       concat(aggregate, {tensor("gy", {Sym::M, Sym::C}, E::Activation, "x"), acc})},
      {"expand_combine", combine},
      {"expand_combine_backward", concat(combine, {streams("gout", "x"), acc})},
      // TE's f32 buffer ops: the same tensors (no acc; the buffer is
      // checked apart, runtime/torch/Checks.h checkBuffer).
      {"aggregate_backward_into",
       concat(aggregate, {tensor("gy", {Sym::M, Sym::C}, E::Activation, "x"), acc})},
      {"expand_combine_backward_into", concat(combine, {streams("gout", "x"), acc})},
      // The fused pre step: project's arguments, then scale's parameters.
      {"pre", concat(project, {scale[2], scale[3]})},
      {"pre_saved", concat(project, {scale[2], scale[3]})},
      // The pre step's gradient: pre's arguments, then the gradients and
      // what pre_saved kept; acc may also be TE's f32 buffer (Checks.h).
      {"pre_backward",
       concat(project, {scale[2], scale[3],
                        tensor("gy", {Sym::M, Sym::C}, E::Activation, "x"),
                        tensor("gpost", {Sym::M, Sym::n}, E::Mixing),
                        tensor("gP", {Sym::M, Sym::n, Sym::n}, E::Mixing), scale[0],
                        scale[1], aggregate[1], logits, acc})},
  };
}

} // namespace

const std::vector<ArgRule> *argRules(std::string_view op) {
  static const auto table = buildTable();
  auto it = table.find(op);
  return it == table.end() ? nullptr : &it->second;
}

const ArgRule *argRule(std::string_view op, std::string_view name) {
  if (const std::vector<ArgRule> *rules = argRules(op))
    for (const ArgRule &rule : *rules)
      if (rule.name == name)
        return &rule;
  return nullptr;
}

} // namespace mhc
