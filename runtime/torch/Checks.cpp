//===- Checks.cpp - argument checks of torch.ops.mhc.* --------------------===//

#include "Checks.h"

#include "mhc/Support/KernelLimits.h"

#include <ATen/MemoryOverlap.h>
#include <c10/util/Exception.h>

#include <cmath>
#include <cstdio>

namespace mhc::ops {

std::string num(int64_t v) { return std::to_string(v); }
std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

namespace {

// Dims as Checker::tensor compares them: a size, or one learned per call.
constexpr int64_t kTokens = -1, kChannels = -2, kUnknown = -3;

const char *describe(ElemClass k) {
  switch (k) {
  case ElemClass::Activation: return "a bfloat16, float16 or float32";
  case ElemClass::Mixing: return "a float32";
  case ElemClass::Param: return "a float32 or bfloat16";
  }
  return "";
}

/// float64 runs on the reference path (tests, CPU) with every floating
/// tensor of the call in float64 (`f64`); otherwise none is.
bool allowed(ElemClass k, at::ScalarType t, bool f64) {
  if (f64 || t == at::kDouble)
    return f64 && t == at::kDouble;
  switch (k) {
  case ElemClass::Activation:
    return t == at::kBFloat16 || t == at::kHalf || t == at::kFloat;
  case ElemClass::Mixing:
    return t == at::kFloat;
  case ElemClass::Param:
    return t == at::kFloat || t == at::kBFloat16;
  }
  return false;
}

std::string shapeText(at::IntArrayRef s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i)
    out += (i ? ", " : "") + num(s[i]);
  return out + "]";
}

std::string symbolicText(const ArgRule &rule) {
  if (!rule.symbolic.empty())
    return std::string(rule.symbolic);
  std::string out = "[";
  for (size_t i = 0; i < rule.dims.size(); ++i)
    out += (i ? ", " : "") + std::string(symbolName(rule.dims[i]));
  return out + "]";
}

const std::vector<ArgRule> &rulesOf(const char *op) {
  const std::vector<ArgRule> *rules = argRules(op);
  TORCH_CHECK(rules, "mhc: no argument rules for op '", op, "'");
  return *rules;
}

} // namespace

Checker::Checker(const char *op, int64_t n) : op(op), n(n), rules(rulesOf(op)) {
  TORCH_CHECK_VALUE(n >= 1 && n <= kMaxStreams, "mhc.", op,
                    ": n must be >= 1 and <= ", num(kMaxStreams), "; got ", num(n));
  TORCH_CHECK(rules.size() <= seen.size(), "mhc.", op, ": too many arguments");
}

void Checker::args(std::initializer_list<const Tensor *> tensors, Str layout,
                   size_t firstRule) {
  size_t i = firstRule;
  for (const Tensor *t : tensors) {
    const ArgRule &rule = rules.at(i);
    seen[i++] = t;
    if (!t) {
      TORCH_CHECK(rule.optional, "mhc.", op, ": argument '", rule.name, "' is missing");
      continue;
    }
    check(rule, *t, layout);
  }
}

const Tensor *Checker::named(std::string_view name) const {
  for (size_t i = 0; i < rules.size(); ++i)
    if (rules[i].name == name)
      return seen[i];
  return nullptr;
}

void Checker::check(const ArgRule &rule, const Tensor &t, Str layout) {
  if (rule.streams) {
    streams(t, rule, layout);
  } else {
    int64_t dims[3];
    size_t rank = rule.dims.size();
    for (size_t i = 0; i < rank; ++i) {
      switch (rule.dims[i]) {
      case Sym::M: dims[i] = kTokens; break;
      case Sym::C: dims[i] = kChannels; break;
      case Sym::n: dims[i] = n; break;
      case Sym::N: dims[i] = numLogits(n); break;
      case Sym::K: dims[i] = C >= 0 ? n * C : kUnknown; break;
      case Sym::Three: dims[i] = 3; break;
      }
    }
    tensor(t, rule, dims, rank, layout);
  }
  if (rule.sameTypeAs.empty())
    return;
  const Tensor *like = named(rule.sameTypeAs);
  TORCH_CHECK_TYPE(!like || t.scalar_type() == like->scalar_type(), "mhc.", op,
                   ": argument '", rule.name, "' must have the dtype of '",
                   rule.sameTypeAs, "' (", like->scalar_type(), "); got ",
                   t.scalar_type());
}

void Checker::tensor(const Tensor &t, const ArgRule &rule, const int64_t *dims,
                     size_t rank, Str layout) {
  // The common (valid) path builds no strings: this runs on every call.
  auto want = [&](size_t i) {
    return dims[i] == kTokens ? M : dims[i] == kChannels ? C : dims[i];
  };
  TORCH_CHECK_TYPE(t.defined(), "mhc.", op, ": argument '", rule.name,
                   "' must be a tensor; got None");
  bool f64 = (first ? first->scalar_type() : t.scalar_type()) == at::kDouble;
  if (!allowed(rule.elem, t.scalar_type(), f64)) {
    if (f64)
      TORCH_CHECK_TYPE(false, "mhc.", op, ": argument '", rule.name,
                       "' must be a float64 tensor, as '", firstName,
                       "' is (float64 needs every tensor in float64); got ",
                       t.scalar_type());
    TORCH_CHECK_TYPE(false, "mhc.", op, ": argument '", rule.name, "' must be ",
                     describe(rule.elem), " tensor; got ", t.scalar_type(),
                     t.scalar_type() == at::kDouble
                         ? " (float64 needs every tensor in float64)"
                         : "");
  }
  bool ok = t.dim() == static_cast<int64_t>(rank);
  for (size_t i = 0; ok && i < rank; ++i)
    ok = want(i) < 0 || t.size(i) == want(i);
  if (!ok) {
    std::string symbolic = rule.streams
                               ? (layout == "nc" ? "[M, n, C]" : "[M, C, n]")
                               : symbolicText(rule);
    std::string expect = symbolic + " = [";
    for (size_t i = 0; i < rank; ++i)
      expect += (i ? ", " : "") +
                (want(i) >= 0 ? num(want(i)) : (dims[i] == kTokens ? "M" : "C"));
    expect += "]";
    TORCH_CHECK_VALUE(false, "mhc.", op, ": argument '", rule.name,
                      "' must have shape ", expect, " (n = ", num(n),
                      "); got shape ", shapeText(t.sizes()));
  }
  for (size_t i = 0; i < rank; ++i) {
    if (dims[i] == kTokens && M < 0)
      M = t.size(i);
    if (dims[i] == kChannels && C < 0)
      C = t.size(i);
  }
  if (!first) {
    first = &t;
    firstName = rule.name;
  }
  if (t.device() != first->device())
    TORCH_CHECK_VALUE(false, "mhc.", op, ": argument '", rule.name, "' is on ",
                      t.device(), " but the other tensors are on ", first->device());
}

void Checker::streams(const Tensor &x, const ArgRule &rule, Str layout) {
  TORCH_CHECK_TYPE(x.defined(), "mhc.", op, ": argument '", rule.name,
                   "' must be a tensor; got None");
  TORCH_CHECK_VALUE(x.dim() == 3, "mhc.", op, ": argument '", rule.name, "' must be ",
                    layout == "nc" ? "[M, n, C]" : "[M, C, n]", " (layout ",
                    layout, ", n = ", num(n), "); got shape ", shapeText(x.sizes()));
  int64_t nc[3] = {kTokens, n, kChannels}, cn[3] = {kTokens, kChannels, n};
  tensor(x, rule, layout == "nc" ? nc : cn, 3, layout);
  // (ms = sum(x^2) / (n*C) needs C >= 1; C is the same for every op.)
  TORCH_CHECK_VALUE(C >= 1, "mhc.", op, ": argument '", rule.name,
                    "' must have C >= 1 channels; got shape ",
                    shapeText(x.sizes()));
}

void checkLayout(const char *op, Str layout) {
  TORCH_CHECK_VALUE(layout == "nc" || layout == "cn", "mhc.", op,
                    ": layout must be 'nc' or 'cn'; got '", layout, "'");
}

namespace {
/// The dialect's ranges (checkNonNegative, checkPositive): finite and >= 0,
/// or finite and > 0.
void checkFinite(const char *op, const char *name, double v, bool positive) {
  const char *range = positive ? " > 0" : " >= 0";
  TORCH_CHECK_VALUE(std::isfinite(v), "mhc.", op, ": ", name,
                    " must be finite and", range, "; got ", num(v));
  TORCH_CHECK_VALUE(positive ? v > 0 : v >= 0, "mhc.", op, ": ", name,
                    " must be", range, "; got ", num(v));
}
} // namespace

void checkSinkhorn(const char *op, Str mode, int64_t iters, double eps) {
  TORCH_CHECK_VALUE(mode == "log" || mode == "softmax_eps", "mhc.", op,
                    ": mode must be 'log' or 'softmax_eps'; got '", mode, "'");
  TORCH_CHECK_VALUE(iters >= 1, "mhc.", op, ": iters must be >= 1; got ", num(iters));
  checkFinite(op, "eps", eps, /*positive=*/false);
}

void checkScale(const char *op, double normEps, double preEps, double postMult) {
  checkFinite(op, "norm_eps", normEps, /*positive=*/false);
  checkFinite(op, "pre_eps", preEps, /*positive=*/false);
  checkFinite(op, "post_mult", postMult, /*positive=*/true);
}

namespace {
/// "torch.bfloat16", as Python prints a dtype (the fake kernels' messages).
std::string dtypeText(at::ScalarType t) {
  switch (t) {
  case at::kBFloat16: return "torch.bfloat16";
  case at::kHalf: return "torch.float16";
  case at::kFloat: return "torch.float32";
  case at::kDouble: return "torch.float64";
  default: return std::string("torch.") + c10::toString(t);
  }
}

std::string describeTensor(at::IntArrayRef sizes, at::ScalarType dtype,
                           const c10::Device &device) {
  return dtypeText(dtype) + " tensor of shape " + shapeText(sizes) + " on " +
         device.str();
}

void checkApart(const char *op, const char *name, const Tensor &out,
                std::initializer_list<NamedTensor> others, const char *what) {
  const c10::StorageImpl *storage = out.unsafeGetTensorImpl()->unsafe_storage().unsafeGetStorageImpl();
  for (const NamedTensor &o : others) {
    if (!o.tensor || !o.tensor->defined() || !o.tensor->has_storage())
      continue;
    // Tensors of different storages cannot overlap: one pointer compare per
    // pair on the common path (this runs on every call).
    if (o.tensor->unsafeGetTensorImpl()->unsafe_storage().unsafeGetStorageImpl() != storage)
      continue;
    auto overlap = at::get_overlap_status(out, *o.tensor);
    TORCH_CHECK_VALUE(overlap != at::MemOverlapStatus::Full &&
                          overlap != at::MemOverlapStatus::Partial,
                      "mhc.", op, ": out argument '", name,
                      "' shares memory with ", what, " '", o.name,
                      "'; it must be a tensor of its own");
  }
}
} // namespace

void checkOut(const char *op, NamedTensor out, at::IntArrayRef sizes,
              at::ScalarType dtype, const Tensor &like,
              std::initializer_list<NamedTensor> inputs,
              std::initializer_list<NamedTensor> earlier) {
  const Tensor &t = *out.tensor;
  // The common (valid) path builds no strings: this runs on every call.
  bool ok = t.defined() && t.scalar_type() == dtype && t.sizes() == sizes &&
            t.device() == like.device() && t.is_contiguous();
  if (!ok) {
    std::string got = !t.defined() ? std::string("NoneType")
                      : "a " + describeTensor(t.sizes(), t.scalar_type(), t.device()) +
                            (t.is_contiguous() ? "" : " (not contiguous)");
    TORCH_CHECK_VALUE(false, "mhc.", op, ": out argument '", out.name,
                      "' must be a contiguous ",
                      describeTensor(sizes, dtype, like.device()), "; got ",
                      got);
  }
  checkApart(op, out.name, t, inputs, "input");
  checkApart(op, out.name, t, earlier, "out argument");
}

void checkBuffer(const char *op, NamedTensor buf, const Tensor &x,
                 std::initializer_list<NamedTensor> inputs) {
  const Tensor &t = *buf.tensor;
  bool ok = t.defined() && t.scalar_type() == at::kFloat && t.sizes() == x.sizes() &&
            t.device() == x.device() && t.is_contiguous();
  if (!ok) {
    std::string got = !t.defined() ? std::string("NoneType")
                      : "a " + describeTensor(t.sizes(), t.scalar_type(), t.device()) +
                            (t.is_contiguous() ? "" : " (not contiguous)");
    TORCH_CHECK_VALUE(false, "mhc.", op, ": '", buf.name,
                      "' (the f32 x-gradient buffer) must be a contiguous ",
                      describeTensor(x.sizes(), at::kFloat, x.device()), "; got ", got);
  }
  checkApart(op, buf.name, t, inputs, "input");
}

const ArgRule &ruleOf(const char *op, std::string_view name) {
  const ArgRule *found = mhc::argRule(op, name);
  TORCH_CHECK(found, "mhc.", op, ": no argument '", name, "'");
  return *found;
}

int64_t streamsOf(const ArgRule &rule, const Tensor &t, Str layout) {
  if (rule.streams) {
    if (t.dim() != 3 || (layout != "nc" && layout != "cn"))
      return 0;
    return t.size(layout == "nc" ? 1 : 2);
  }
  if (t.dim() != static_cast<int64_t>(rule.dims.size()))
    return 0;
  for (size_t i = rule.dims.size(); i-- > 0;) // the last (logits: [M, n, n])
    if (rule.dims[i] == Sym::n)
      return t.size(i);
  for (size_t i = 0; i < rule.dims.size(); ++i)
    if (rule.dims[i] == Sym::N)
      return streamsOfLogits(t.size(i));
  return 0;
}

} // namespace mhc::ops
