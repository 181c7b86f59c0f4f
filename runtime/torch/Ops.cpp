//===- Ops.cpp - torch.ops.mhc: schemas, checks, kernels, fallback --------===//
//
// Every mhc op and its gradient as a PyTorch operator. CUDA tensors run the
// generated kernels through the runtime (JIT-compiled on first use); CPU
// tensors, and every CUDA case the kernels do not cover, run the ATen
// reference (Reference.cpp) after a one-time warning that names the reason.
// Autograd is registered in C++ (Autograd.cpp), the fake (meta) kernels in
// Python (python/mhc/_registry.py).
//
//===----------------------------------------------------------------------===//

#include "OpHandles.h"
#include "Reference.h"
#include "Stats.h"

#include "mhc/Runtime/Runtime.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <cmath>
#include <cstdlib>
#include <mutex>
#include <set>
#include <cstdio>
#include <string>

using at::Tensor;
using OptTensor = std::optional<Tensor>;
using Str = c10::string_view;

namespace {

//===----------------------------------------------------------------------===//
// Argument checks: errors name the op, the argument and what was expected.
//===----------------------------------------------------------------------===//

enum class Kind { Activation, Mixing, Param };

const char *describe(Kind k) {
  switch (k) {
  case Kind::Activation: return "a bfloat16, float16 or float32";
  case Kind::Mixing: return "a float32";
  case Kind::Param: return "a float32 or bfloat16";
  }
  return "";
}

/// float64 runs on the reference path (tests, CPU) with every floating
/// tensor of the call in float64 (`f64`); otherwise none is.
bool allowed(Kind k, at::ScalarType t, bool f64) {
  if (f64 || t == at::kDouble)
    return f64 && t == at::kDouble;
  switch (k) {
  case Kind::Activation:
    return t == at::kBFloat16 || t == at::kHalf || t == at::kFloat;
  case Kind::Mixing:
    return t == at::kFloat;
  case Kind::Param:
    return t == at::kFloat || t == at::kBFloat16;
  }
  return false;
}

// Numbers in error messages are formatted here, never inserted into a
// std::ostream (c10::str's, included): on the GPU machine's torch build an
// integer inserted into an ostream from this extension crashed the process
// (SIGSEGV in basic_ostream::_M_insert<long>) where the error should have
// been raised. Messages therefore pass c10::str strings only.
std::string num(int64_t v) { return std::to_string(v); }
std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

std::string shapeText(at::IntArrayRef s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i)
    out += (i ? ", " : "") + num(s[i]);
  return out + "]";
}

struct Checker {
  const char *op; // "mhc.<op>"
  const Tensor *first = nullptr;
  const char *firstName = nullptr;
  int64_t M = -1, C = -1, n = 0;

  /// `dims` uses -1 for M and -2 for C; `symbolic` is e.g. "[M, n, C]".
  void tensor(const Tensor &t, const char *name,
              std::initializer_list<int64_t> dimList, const char *symbolic,
              Kind kind) {
    // The common (valid) path builds no strings: this runs on every call.
    const int64_t *dims = dimList.begin();
    size_t rank = dimList.size();
    auto want = [&](size_t i) {
      return dims[i] == -1 ? M : dims[i] == -2 ? C : dims[i];
    };
    TORCH_CHECK_TYPE(t.defined(), "mhc.", op, ": argument '", name,
                     "' must be a tensor; got None");
    bool f64 = (first ? first->scalar_type() : t.scalar_type()) == at::kDouble;
    if (!allowed(kind, t.scalar_type(), f64)) {
      if (f64)
        TORCH_CHECK_TYPE(false, "mhc.", op, ": argument '", name,
                         "' must be a float64 tensor, as '", firstName,
                         "' is (float64 needs every tensor in float64); got ",
                         t.scalar_type());
      TORCH_CHECK_TYPE(false, "mhc.", op, ": argument '", name, "' must be ",
                       describe(kind), " tensor; got ", t.scalar_type(),
                       t.scalar_type() == at::kDouble
                           ? " (float64 needs every tensor in float64)"
                           : "");
    }
    bool ok = t.dim() == static_cast<int64_t>(rank);
    for (size_t i = 0; ok && i < rank; ++i)
      ok = want(i) < 0 || t.size(i) == want(i);
    if (!ok) {
      std::string expect = std::string(symbolic) + " = [";
      for (size_t i = 0; i < rank; ++i)
        expect += (i ? ", " : "") +
                  (want(i) >= 0 ? num(want(i)) : (dims[i] == -1 ? "M" : "C"));
      expect += "]";
      TORCH_CHECK_VALUE(false, "mhc.", op, ": argument '", name, "' must have shape ",
                        expect, " (n = ", num(n), "); got shape ",
                        shapeText(t.sizes()));
    }
    for (size_t i = 0; i < rank; ++i) {
      if (dims[i] == -1 && M < 0)
        M = t.size(i);
      if (dims[i] == -2 && C < 0)
        C = t.size(i);
    }
    if (!first) {
      first = &t;
      firstName = name;
    }
    if (t.device() != first->device())
      TORCH_CHECK_VALUE(false, "mhc.", op, ": argument '", name, "' is on ", t.device(),
                        " but the other tensors are on ", first->device());
  }

  void streams(const Tensor &x, const char *name, Str layout) {
    TORCH_CHECK_TYPE(x.defined(), "mhc.", op, ": argument '", name,
                     "' must be a tensor; got None");
    TORCH_CHECK_VALUE(x.dim() == 3, "mhc.", op, ": argument '", name, "' must be ",
                      layout == "nc" ? "[M, n, C]" : "[M, C, n]", " (layout ",
                      layout, ", n = ", num(n), "); got shape ", shapeText(x.sizes()));
    if (layout == "nc")
      tensor(x, name, {-1, n, -2}, "[M, n, C]", Kind::Activation);
    else
      tensor(x, name, {-1, -2, n}, "[M, C, n]", Kind::Activation);
    // (ms = sum(x^2) / (n*C) needs C >= 1; C is the same for every op.)
    TORCH_CHECK_VALUE(C >= 1, "mhc.", op, ": argument '", name,
                      "' must have C >= 1 channels; got shape ",
                      shapeText(x.sizes()));
  }

  void sameType(const Tensor &t, const char *name, const Tensor &like,
                const char *likeName) {
    TORCH_CHECK_TYPE(t.scalar_type() == like.scalar_type(), "mhc.", op, ": argument '",
                     name, "' must have the dtype of '", likeName, "' (",
                     like.scalar_type(), "); got ", t.scalar_type());
  }
};

Checker checker(const char *op, int64_t n) {
  TORCH_CHECK_VALUE(n >= 1 && n <= mhc::ops::kMaxStreams, "mhc.", op,
                    ": n must be >= 1 and <= ", num(mhc::ops::kMaxStreams), "; got ",
                    num(n));
  return Checker{op, nullptr, nullptr, -1, -1, n};
}

void checkLayout(const char *op, Str layout) {
  TORCH_CHECK_VALUE(layout == "nc" || layout == "cn", "mhc.", op,
                    ": layout must be 'nc' or 'cn'; got '", layout, "'");
}

/// The dialect's ranges (checkNonNegative, checkPositive): finite and >= 0,
/// or finite and > 0.
void checkFinite(const char *op, const char *name, double v, bool positive) {
  const char *range = positive ? " > 0" : " >= 0";
  TORCH_CHECK_VALUE(std::isfinite(v), "mhc.", op, ": ", name,
                    " must be finite and", range, "; got ", num(v));
  TORCH_CHECK_VALUE(positive ? v > 0 : v >= 0, "mhc.", op, ": ", name,
                    " must be", range, "; got ", num(v));
}

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

//===----------------------------------------------------------------------===//
// Kernel selection, launch and fallback.
//===----------------------------------------------------------------------===//

bool env(const char *name) {
  const char *v = std::getenv(name);
  return v && std::string(v) == "1";
}

// Read once per process (getenv scans the environment on every call).
bool forceReference() {
  static const bool on = env("MHC_FORCE_REFERENCE");
  return on;
}
bool logging() {
  static const bool on = env("MHC_LOG");
  return on;
}

void warnOnce(const std::string &message) {
  static std::mutex mutex;
  static std::set<std::string> warned;
  std::lock_guard<std::mutex> lock(mutex);
  if (!warned.insert(message).second)
    return;
  if (mhc::stats::warningHook)
    mhc::stats::warningHook(message);
  else
    TORCH_WARN(message);
}

std::optional<mhc::DType> dtypeOf(const Tensor &t) {
  switch (t.scalar_type()) {
  case at::kBFloat16: return mhc::DType::BF16;
  case at::kHalf: return mhc::DType::F16;
  case at::kFloat: return mhc::DType::F32;
  default: return std::nullopt;
  }
}

mhc::Layout layoutOf(Str layout) {
  return layout == "nc" ? mhc::Layout::NC : mhc::Layout::CN;
}

/// The loaded kernel for `spec`, or nullptr (after a one-time warning naming
/// the reason) when this call must take the reference path.
const mhc::rt::LoadedKernel *select(const char *op, mhc::KernelSpec spec,
                                    std::initializer_list<const Tensor *> inputs,
                                    int64_t M) {
  std::string reason;
  const Tensor &first = **inputs.begin();
  if (forceReference())
    reason = "MHC_FORCE_REFERENCE=1";
  else if (M == 0) {
    ++mhc::stats::referenceCalls;
    return nullptr; // nothing to launch; the reference returns the empties/zeros
  }
  for (const Tensor *t : inputs) {
    if (!reason.empty())
      break;
    if (!t->defined())
      continue;
    if (!dtypeOf(*t))
      reason = std::string("a ") + c10::toString(t->scalar_type()) + " input";
    else if (!t->is_contiguous())
      reason = "a non-contiguous input";
    else if (reinterpret_cast<uintptr_t>(t->data_ptr()) % 16 != 0)
      reason = "an input not 16-byte aligned";
  }
  const mhc::rt::LoadedKernel *kernel = nullptr;
  if (reason.empty()) {
    try {
      auto &rt = mhc::rt::Runtime::get();
      spec.arch = rt.archOf(first.get_device());
      reason = mhc::unsupportedReason(spec);
      if (reason.empty())
        kernel = &rt.kernel(spec, first.get_device());
    } catch (const mhc::rt::Error &e) {
      reason = e.what();
    }
  }
  if (kernel) {
    ++mhc::stats::kernelCalls;
    if (logging()) {
      static std::mutex mutex;
      static std::set<std::string> seen;
      std::lock_guard<std::mutex> lock(mutex);
      if (seen.insert(spec.canonical()).second)
        std::fprintf(stderr, "[mhc] %s: kernel %s [%s]\n", op,
                     spec.kernelName().c_str(), spec.canonical().c_str());
    }
    return kernel;
  }
  ++mhc::stats::referenceCalls;
  warnOnce(std::string("mhc.") + op + ": running the reference path (" +
           reason + ")" + (spec.channels ? " for " + spec.canonical() : ""));
  return nullptr;
}

/// Launches `kernel` with the named tensors; an output named with a null
/// tensor is written to the workspace and dropped. The workspaces share one
/// allocation from PyTorch's caching allocator (on the current stream), each
/// at a 256-byte boundary: at small M allocations are a large part of a
/// call's host time, so there is one per call, not one per workspace.
void launch(const mhc::rt::LoadedKernel &kernel, int64_t M,
            std::initializer_list<std::pair<const char *, const Tensor *>> named,
            const Tensor &like) {
  const mhc::Manifest &m = kernel.manifest;
  int64_t S = mhc::rt::Runtime::split(kernel, M);
  c10::SmallVector<void *, 16> buffers(m.buffers.size(), nullptr);
  c10::SmallVector<int64_t, 16> workspaceAt(m.buffers.size(), -1);
  int64_t workspaceBytes = 0;
  for (size_t i = 0; i < m.buffers.size(); ++i) {
    const mhc::BufferDesc &b = m.buffers[i];
    int64_t elems = b.elems.at(M, S);
    const Tensor *t = nullptr;
    bool scratch = false; // named with no tensor: an output nobody keeps
    for (auto &[name, tensor] : named)
      if (b.name[0] == name[0] && b.name == name) { // (per call: cheap test first)
        t = tensor;
        scratch = !tensor;
      }
    if (!t) {
      TORCH_CHECK(scratch || b.role == mhc::BufferRole::Workspace, "mhc: kernel ",
                  kernel.spec.kernelName(), " needs buffer '", b.name, "'");
      workspaceAt[i] = workspaceBytes;
      int64_t bytes = std::max<int64_t>(elems, 1) * mhc::byteWidth(b.dtype);
      workspaceBytes += (bytes + 255) / 256 * 256;
      continue;
    }
    TORCH_CHECK(t->numel() == elems, "mhc: buffer '", b.name, "' of ",
                kernel.spec.kernelName(), " has ", num(t->numel()),
                " elements; the kernel expects ", num(elems));
    buffers[i] = t->data_ptr();
  }
  c10::cuda::CUDAGuard guard(like.device());
  auto stream = at::cuda::getCurrentCUDAStream(like.get_device()).stream();
  // Straight from the caching allocator (on the current stream, like a
  // temporary tensor): no tensor to build, ~1 us less per call on H100.
  c10::DataPtr workspace;
  if (workspaceBytes) {
    workspace = c10::cuda::CUDACachingAllocator::get()->allocate(workspaceBytes);
    auto *base = static_cast<char *>(workspace.get());
    for (size_t i = 0; i < m.buffers.size(); ++i)
      if (workspaceAt[i] >= 0)
        buffers[i] = base + workspaceAt[i];
  }
  try {
    mhc::rt::Runtime::get().launch(kernel, M, S, buffers.data(), buffers.size(),
                                   reinterpret_cast<mhc::rt::CUstream>(stream));
  } catch (const mhc::rt::Error &e) {
    TORCH_CHECK(false, e.what());
  }
}

mhc::KernelSpec baseSpec(mhc::OpKind op, mhc::Direction dir, int64_t n) {
  mhc::KernelSpec s;
  s.op = op;
  s.dir = dir;
  s.n = n;
  return s;
}

void streamsSpec(mhc::KernelSpec &s, const Tensor &x, Str layout, int64_t C) {
  s.act = dtypeOf(x).value_or(mhc::DType::F32);
  s.layout = layoutOf(layout);
  s.channels = C;
}

/// The projection's spec fields (also the fused pre step's).
mhc::KernelSpec projectSpec(mhc::Direction dir, int64_t n, const Tensor &x,
                            Str layout, int64_t C, const Tensor &phi,
                            const OptTensor &weight, bool tf32) {
  auto spec = baseSpec(mhc::OpKind::Project, dir, n);
  streamsSpec(spec, x, layout, C);
  spec.param = dtypeOf(phi).value_or(mhc::DType::F32);
  spec.tf32 = tf32;
  spec.hasWeight = weight.has_value();
  return spec;
}

/// An optional input: undefined when absent (the kernel then has no such
/// buffer, and select() skips it).
Tensor orUndefined(const OptTensor &t) { return t ? *t : Tensor(); }

//===----------------------------------------------------------------------===//
// project
//===----------------------------------------------------------------------===//

Checker checkProject(const char *op, const Tensor &x, const Tensor &phi,
                     const OptTensor &weight, int64_t n, Str layout) {
  checkLayout(op, layout);
  Checker c = checker(op, n);
  c.streams(x, "x", layout);
  int64_t N = 2 * n + n * n, K = n * c.C;
  c.tensor(phi, "phi", {N, K}, "[N, K] = [2n + n^2, n*C]", Kind::Param);
  if (weight) {
    c.tensor(*weight, "weight", {K}, "[K]", Kind::Param);
    c.sameType(*weight, "weight", phi, "phi");
  }
  return c;
}

std::tuple<Tensor, Tensor> project_ref(const Tensor &x, const Tensor &phi,
                                       const OptTensor &weight, int64_t n,
                                       Str layout, bool tf32) {
  checkProject("project", x, phi, weight, n, layout);
  return mhc::ref::project(x, phi, weight);
}

std::tuple<Tensor, Tensor> project_cuda(const Tensor &x, const Tensor &phi,
                                        const OptTensor &weight, int64_t n,
                                        Str layout, bool tf32) {
  Checker c = checkProject("project", x, phi, weight, n, layout);
  int64_t M = c.M, N = 2 * n + n * n;
  auto spec = projectSpec(mhc::Direction::Forward, n, x, layout, c.C, phi, weight, tf32);
  Tensor w = orUndefined(weight);
  auto *k = select("project", spec, {&x, &phi, &w}, M);
  if (!k)
    return mhc::ref::project(x, phi, weight);
  auto mixing = x.options().dtype(mhc::ref::mixingType(x.scalar_type()));
  Tensor h = at::empty({M, N}, mixing);
  Tensor ms = at::empty({M}, mixing);
  launch(*k, M, {{"x", &x}, {"phi", &phi}, {"weight", &w}, {"h", &h}, {"ms", &ms}}, x);
  return {h, ms};
}

Checker checkProjectBackward(const char *op, const Tensor &gh,
                             const Tensor &gms, const Tensor &x,
                             const Tensor &phi, const OptTensor &weight,
                             int64_t n, Str layout) {
  Checker c = checkProject(op, x, phi, weight, n, layout);
  int64_t N = 2 * n + n * n;
  c.tensor(gh, "gh", {-1, N}, "[M, N]", Kind::Mixing);
  c.tensor(gms, "gms", {-1}, "[M]", Kind::Mixing);
  return c;
}

std::tuple<Tensor, Tensor, Tensor> project_backward_ref(
    const Tensor &gh, const Tensor &gms, const Tensor &x, const Tensor &phi,
    const OptTensor &weight, int64_t n, Str layout, bool tf32) {
  checkProjectBackward("project_backward", gh, gms, x, phi, weight, n, layout);
  return mhc::ref::project_backward(gh, gms, x, phi, weight);
}

std::tuple<Tensor, Tensor, Tensor> project_backward_cuda(
    const Tensor &gh, const Tensor &gms, const Tensor &x, const Tensor &phi,
    const OptTensor &weight, int64_t n, Str layout, bool tf32) {
  Checker c = checkProjectBackward("project_backward", gh, gms, x, phi, weight,
                                   n, layout);
  int64_t M = c.M;
  auto spec = projectSpec(mhc::Direction::Backward, n, x, layout, c.C, phi, weight, tf32);
  Tensor w = orUndefined(weight);
  auto *k = select("project_backward", spec, {&x, &phi, &w, &gh, &gms}, M);
  if (!k)
    return mhc::ref::project_backward(gh, gms, x, phi, weight);
  Tensor gx = at::empty_like(x);
  Tensor gphi = at::empty_like(phi);
  Tensor gw = weight ? at::empty_like(*weight) : at::empty({0}, phi.options());
  launch(*k, M, {{"gh", &gh}, {"gms", &gms}, {"x", &x}, {"phi", &phi},
                 {"weight", &w}, {"gx", &gx}, {"gphi", &gphi}, {"gweight", &gw}},
         x);
  return {gx, gphi, gw};
}

//===----------------------------------------------------------------------===//
// scale
//===----------------------------------------------------------------------===//

Checker checkScaleInputs(const char *op, const Tensor &h, const Tensor &ms,
                         const Tensor &alpha, const Tensor &beta, int64_t n,
                         double normEps, double preEps, double postMult) {
  checkScale(op, normEps, preEps, postMult);
  Checker c = checker(op, n);
  int64_t N = 2 * n + n * n;
  c.tensor(h, "h", {-1, N}, "[M, N]", Kind::Mixing);
  c.tensor(ms, "ms", {-1}, "[M]", Kind::Mixing);
  c.tensor(alpha, "alpha", {3}, "[3]", Kind::Param);
  c.tensor(beta, "beta", {N}, "[N]", Kind::Param);
  c.sameType(beta, "beta", alpha, "alpha");
  return c;
}

std::tuple<Tensor, Tensor, Tensor> scale_ref(const Tensor &h, const Tensor &ms,
                                             const Tensor &alpha,
                                             const Tensor &beta, int64_t n,
                                             double normEps, double preEps,
                                             double postMult) {
  checkScaleInputs("scale", h, ms, alpha, beta, n, normEps, preEps, postMult);
  return mhc::ref::scale(h, ms, alpha, beta, n, normEps, preEps, postMult);
}

/// scale's attributes in a spec (scale's own, and the fused pre step's).
void scaleFields(mhc::KernelSpec &spec, double normEps, double preEps, double postMult) {
  spec.normEps = static_cast<float>(normEps);
  spec.preEps = static_cast<float>(preEps);
  spec.postMult = static_cast<float>(postMult);
}

mhc::KernelSpec scaleSpec(mhc::Direction dir, int64_t n, const Tensor &beta,
                          double normEps, double preEps, double postMult) {
  auto spec = baseSpec(mhc::OpKind::Scale, dir, n);
  spec.param = dtypeOf(beta).value_or(mhc::DType::F32);
  scaleFields(spec, normEps, preEps, postMult);
  return spec;
}

std::tuple<Tensor, Tensor, Tensor> scale_cuda(const Tensor &h, const Tensor &ms,
                                              const Tensor &alpha,
                                              const Tensor &beta, int64_t n,
                                              double normEps, double preEps,
                                              double postMult) {
  Checker c = checkScaleInputs("scale", h, ms, alpha, beta, n, normEps, preEps,
                               postMult);
  int64_t M = c.M;
  auto spec = scaleSpec(mhc::Direction::Forward, n, beta, normEps, preEps, postMult);
  auto *k = select("scale", spec, {&h, &ms, &alpha, &beta}, M);
  if (!k)
    return mhc::ref::scale(h, ms, alpha, beta, n, normEps, preEps, postMult);
  Tensor pre = at::empty({M, n}, h.options());
  Tensor post = at::empty({M, n}, h.options());
  Tensor logits = at::empty({M, n, n}, h.options());
  launch(*k, M, {{"h", &h}, {"ms", &ms}, {"alpha", &alpha}, {"beta", &beta},
                 {"pre", &pre}, {"post", &post}, {"logits", &logits}},
         h);
  return {pre, post, logits};
}

Checker checkScaleBackward(const Tensor &gpre, const Tensor &gpost,
                           const Tensor &glogits, const Tensor &h,
                           const Tensor &ms, const Tensor &alpha,
                           const Tensor &beta, int64_t n, double normEps,
                           double preEps, double postMult) {
  Checker c = checkScaleInputs("scale_backward", h, ms, alpha, beta, n,
                               normEps, preEps, postMult);
  c.tensor(gpre, "gpre", {-1, n}, "[M, n]", Kind::Mixing);
  c.tensor(gpost, "gpost", {-1, n}, "[M, n]", Kind::Mixing);
  c.tensor(glogits, "glogits", {-1, n, n}, "[M, n, n]", Kind::Mixing);
  return c;
}

std::tuple<Tensor, Tensor, Tensor, Tensor> scale_backward_ref(
    const Tensor &gpre, const Tensor &gpost, const Tensor &glogits,
    const Tensor &h, const Tensor &ms, const Tensor &alpha, const Tensor &beta,
    int64_t n, double normEps, double preEps, double postMult) {
  checkScaleBackward(gpre, gpost, glogits, h, ms, alpha, beta, n, normEps,
                     preEps, postMult);
  return mhc::ref::scale_backward(gpre, gpost, glogits, h, ms, alpha, beta, n,
                                  normEps, preEps, postMult);
}

std::tuple<Tensor, Tensor, Tensor, Tensor> scale_backward_cuda(
    const Tensor &gpre, const Tensor &gpost, const Tensor &glogits,
    const Tensor &h, const Tensor &ms, const Tensor &alpha, const Tensor &beta,
    int64_t n, double normEps, double preEps, double postMult) {
  Checker c = checkScaleBackward(gpre, gpost, glogits, h, ms, alpha, beta, n,
                                 normEps, preEps, postMult);
  int64_t M = c.M;
  auto spec = scaleSpec(mhc::Direction::Backward, n, beta, normEps, preEps, postMult);
  auto *k = select("scale_backward", spec,
                   {&h, &ms, &alpha, &beta, &gpre, &gpost, &glogits}, M);
  if (!k)
    return mhc::ref::scale_backward(gpre, gpost, glogits, h, ms, alpha, beta,
                                    n, normEps, preEps, postMult);
  Tensor gh = at::empty_like(h), gms = at::empty_like(ms);
  Tensor galpha = at::empty_like(alpha), gbeta = at::empty_like(beta);
  launch(*k, M, {{"gpre", &gpre}, {"gpost", &gpost}, {"glogits", &glogits},
                 {"h", &h}, {"ms", &ms}, {"alpha", &alpha}, {"beta", &beta},
                 {"gh", &gh}, {"gms", &gms}, {"galpha", &galpha},
                 {"gbeta", &gbeta}},
         h);
  return {gh, gms, galpha, gbeta};
}

//===----------------------------------------------------------------------===//
// sinkhorn
//===----------------------------------------------------------------------===//

/// sinkhorn's attributes in a spec (sinkhorn's own, and the fused pre step's).
void sinkhornFields(mhc::KernelSpec &spec, Str mode, int64_t iters, double eps) {
  spec.mode = mode == "log" ? mhc::SinkhornMode::Log : mhc::SinkhornMode::SoftmaxEps;
  spec.iters = iters;
  spec.eps = static_cast<float>(eps);
}

mhc::KernelSpec sinkhornSpec(mhc::Direction dir, int64_t n, Str mode,
                             int64_t iters, double eps) {
  auto spec = baseSpec(mhc::OpKind::Sinkhorn, dir, n);
  sinkhornFields(spec, mode, iters, eps);
  return spec;
}

Checker checkSinkhornInputs(const char *op, const Tensor *gP,
                            const Tensor &logits, int64_t n, Str mode,
                            int64_t iters, double eps) {
  checkSinkhorn(op, mode, iters, eps);
  Checker c = checker(op, n);
  if (gP)
    c.tensor(*gP, "gP", {-1, n, n}, "[M, n, n]", Kind::Mixing);
  c.tensor(logits, "logits", {-1, n, n}, "[M, n, n]", Kind::Mixing);
  return c;
}

Tensor sinkhorn_ref(const Tensor &logits, int64_t n, Str mode, int64_t iters,
                    double eps) {
  checkSinkhornInputs("sinkhorn", nullptr, logits, n, mode, iters, eps);
  return mhc::ref::sinkhorn(logits, std::string(mode), iters, eps);
}

Tensor sinkhorn_cuda(const Tensor &logits, int64_t n, Str mode, int64_t iters,
                     double eps) {
  Checker c = checkSinkhornInputs("sinkhorn", nullptr, logits, n, mode, iters, eps);
  auto spec = sinkhornSpec(mhc::Direction::Forward, n, mode, iters, eps);
  auto *k = select("sinkhorn", spec, {&logits}, c.M);
  if (!k)
    return mhc::ref::sinkhorn(logits, std::string(mode), iters, eps);
  Tensor P = at::empty_like(logits);
  launch(*k, c.M, {{"logits", &logits}, {"P", &P}}, logits);
  return P;
}

Tensor sinkhorn_backward_ref(const Tensor &gP, const Tensor &logits, int64_t n,
                             Str mode, int64_t iters, double eps) {
  Checker c = checkSinkhornInputs("sinkhorn_backward", &gP, logits, n, mode,
                                  iters, eps);
  return mhc::ref::sinkhorn_backward(gP, logits, std::string(mode), iters, eps);
}

Tensor sinkhorn_backward_cuda(const Tensor &gP, const Tensor &logits,
                              int64_t n, Str mode, int64_t iters, double eps) {
  Checker c = checkSinkhornInputs("sinkhorn_backward", &gP, logits, n, mode,
                                  iters, eps);
  auto spec = sinkhornSpec(mhc::Direction::Backward, n, mode, iters, eps);
  auto *k = select("sinkhorn_backward", spec, {&gP, &logits}, c.M);
  if (!k)
    return mhc::ref::sinkhorn_backward(gP, logits, std::string(mode), iters, eps);
  Tensor g = at::empty_like(logits);
  launch(*k, c.M, {{"gP", &gP}, {"logits", &logits}, {"glogits", &g}}, logits);
  return g;
}

//===----------------------------------------------------------------------===//
// aggregate
//===----------------------------------------------------------------------===//

Checker checkAggregate(const char *op, const Tensor &x, const Tensor &pre,
                       int64_t n, Str layout) {
  checkLayout(op, layout);
  Checker c = checker(op, n);
  c.streams(x, "x", layout);
  c.tensor(pre, "pre", {-1, n}, "[M, n]", Kind::Mixing);
  return c;
}

Tensor aggregate_ref(const Tensor &x, const Tensor &pre, int64_t n, Str layout) {
  checkAggregate("aggregate", x, pre, n, layout);
  return mhc::ref::aggregate(x, pre, std::string(layout));
}

Tensor aggregate_cuda(const Tensor &x, const Tensor &pre, int64_t n, Str layout) {
  Checker c = checkAggregate("aggregate", x, pre, n, layout);
  auto spec = baseSpec(mhc::OpKind::Aggregate, mhc::Direction::Forward, n);
  streamsSpec(spec, x, layout, c.C);
  auto *k = select("aggregate", spec, {&x, &pre}, c.M);
  if (!k)
    return mhc::ref::aggregate(x, pre, std::string(layout));
  Tensor y = at::empty({c.M, c.C}, x.options());
  launch(*k, c.M, {{"x", &x}, {"pre", &pre}, {"y", &y}}, x);
  return y;
}

Checker checkAggregateBackward(const Tensor &gy, const Tensor &x,
                               const Tensor &pre, int64_t n, Str layout) {
  Checker c = checkAggregate("aggregate_backward", x, pre, n, layout);
  c.tensor(gy, "gy", {-1, -2}, "[M, C]", Kind::Activation);
  c.sameType(gy, "gy", x, "x");
  return c;
}

std::tuple<Tensor, Tensor> aggregate_backward_ref(const Tensor &gy,
                                                  const Tensor &x,
                                                  const Tensor &pre, int64_t n,
                                                  Str layout) {
  checkAggregateBackward(gy, x, pre, n, layout);
  return mhc::ref::aggregate_backward(gy, x, pre, std::string(layout));
}

std::tuple<Tensor, Tensor> aggregate_backward_cuda(const Tensor &gy,
                                                   const Tensor &x,
                                                   const Tensor &pre,
                                                   int64_t n, Str layout) {
  Checker c = checkAggregateBackward(gy, x, pre, n, layout);
  auto spec = baseSpec(mhc::OpKind::Aggregate, mhc::Direction::Backward, n);
  streamsSpec(spec, x, layout, c.C);
  auto *k = select("aggregate_backward", spec, {&x, &pre, &gy}, c.M);
  if (!k)
    return mhc::ref::aggregate_backward(gy, x, pre, std::string(layout));
  Tensor gx = at::empty_like(x), gpre = at::empty_like(pre);
  launch(*k, c.M, {{"gy", &gy}, {"x", &x}, {"pre", &pre}, {"gx", &gx},
                   {"gpre", &gpre}},
         x);
  return {gx, gpre};
}

//===----------------------------------------------------------------------===//
// expand_combine
//===----------------------------------------------------------------------===//

Checker checkCombine(const char *op, const Tensor &f, const Tensor &post,
                     const Tensor &x, const Tensor &P, const OptTensor &bias,
                     int64_t n, Str layout) {
  checkLayout(op, layout);
  Checker c = checker(op, n);
  c.streams(x, "x", layout);
  c.tensor(f, "f", {-1, -2}, "[M, C]", Kind::Activation);
  c.sameType(f, "f", x, "x");
  c.tensor(post, "post", {-1, n}, "[M, n]", Kind::Mixing);
  c.tensor(P, "P", {-1, n, n}, "[M, n, n]", Kind::Mixing);
  if (bias)
    c.tensor(*bias, "bias", {-2}, "[C]", Kind::Param);
  return c;
}

mhc::KernelSpec combineSpec(mhc::Direction dir, int64_t n, const Tensor &x,
                            Str layout, int64_t C, const OptTensor &bias) {
  auto spec = baseSpec(mhc::OpKind::ExpandCombine, dir, n);
  streamsSpec(spec, x, layout, C);
  spec.hasBias = bias.has_value();
  if (bias)
    spec.param = dtypeOf(*bias).value_or(mhc::DType::F32);
  return spec;
}

Tensor expand_combine_ref(const Tensor &f, const Tensor &post, const Tensor &x,
                          const Tensor &P, const OptTensor &bias, int64_t n,
                          Str layout) {
  checkCombine("expand_combine", f, post, x, P, bias, n, layout);
  return mhc::ref::expand_combine(f, post, x, P, bias, std::string(layout));
}

Tensor expand_combine_cuda(const Tensor &f, const Tensor &post, const Tensor &x,
                           const Tensor &P, const OptTensor &bias, int64_t n,
                           Str layout) {
  Checker c = checkCombine("expand_combine", f, post, x, P, bias, n, layout);
  auto spec = combineSpec(mhc::Direction::Forward, n, x, layout, c.C, bias);
  Tensor b = orUndefined(bias);
  auto *k = select("expand_combine", spec, {&x, &f, &post, &P, &b}, c.M);
  if (!k)
    return mhc::ref::expand_combine(f, post, x, P, bias, std::string(layout));
  Tensor out = at::empty_like(x);
  launch(*k, c.M, {{"f", &f}, {"post", &post}, {"x", &x}, {"P", &P},
                   {"bias", &b}, {"out", &out}},
         x);
  return out;
}

Checker checkCombineBackward(const Tensor &gout, const Tensor &f,
                             const Tensor &post, const Tensor &x,
                             const Tensor &P, const OptTensor &bias, int64_t n,
                             Str layout) {
  Checker c = checkCombine("expand_combine_backward", f, post, x, P, bias, n, layout);
  c.streams(gout, "gout", layout);
  c.sameType(gout, "gout", x, "x");
  return c;
}

std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor> expand_combine_backward_ref(
    const Tensor &gout, const Tensor &f, const Tensor &post, const Tensor &x,
    const Tensor &P, const OptTensor &bias, int64_t n, Str layout) {
  Checker c = checkCombineBackward(gout, f, post, x, P, bias, n, layout);
  return mhc::ref::expand_combine_backward(gout, f, post, x, P, bias,
                                           std::string(layout));
}

std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor> expand_combine_backward_cuda(
    const Tensor &gout, const Tensor &f, const Tensor &post, const Tensor &x,
    const Tensor &P, const OptTensor &bias, int64_t n, Str layout) {
  Checker c = checkCombineBackward(gout, f, post, x, P, bias, n, layout);
  auto spec = combineSpec(mhc::Direction::Backward, n, x, layout, c.C, bias);
  Tensor b = orUndefined(bias);
  auto *k = select("expand_combine_backward", spec,
                   {&x, &gout, &f, &post, &P, &b}, c.M);
  if (!k)
    return mhc::ref::expand_combine_backward(gout, f, post, x, P, bias,
                                             std::string(layout));
  Tensor gf = at::empty_like(f), gpost = at::empty_like(post);
  Tensor gx = at::empty_like(x), gP = at::empty_like(P);
  Tensor gbias = bias ? at::empty_like(*bias) : at::empty({0}, x.options());
  launch(*k, c.M, {{"gout", &gout}, {"f", &f}, {"post", &post}, {"x", &x},
                   {"P", &P}, {"bias", &b}, {"gf", &gf}, {"gpost", &gpost},
                   {"gx", &gx}, {"gP", &gP}, {"gbias", &gbias}},
         x);
  return {gf, gpost, gx, gP, gbias};
}


//===----------------------------------------------------------------------===//
// pre: project -> scale -> sinkhorn -> aggregate in one call
//===----------------------------------------------------------------------===//

using PreOut = std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor>;

/// For n >= 6, the fused pre kernel runs up to this many tokens (below).
constexpr int64_t kFusedPreMaxTokens = 512;

Checker checkPre(const char *op, const Tensor &x, const Tensor &phi,
                 const Tensor &alpha, const Tensor &beta,
                 const OptTensor &weight, int64_t n, Str layout, double normEps,
                 double preEps, double postMult, Str mode, int64_t iters,
                 double eps) {
  Checker c = checkProject(op, x, phi, weight, n, layout);
  checkScale(op, normEps, preEps, postMult);
  checkSinkhorn(op, mode, iters, eps);
  int64_t N = 2 * n + n * n;
  c.tensor(alpha, "alpha", {3}, "[3]", Kind::Param);
  c.tensor(beta, "beta", {N}, "[N]", Kind::Param);
  c.sameType(beta, "beta", alpha, "alpha");
  return c;
}

/// The four ops one after the other (the CPU path, and CUDA cases the fused
/// kernel does not cover); (y, post, P, h, ms, pre, logits).
template <typename Project, typename Scale, typename Sinkhorn, typename Aggregate>
PreOut preSteps(Project project, Scale scale, Sinkhorn sinkhorn,
                Aggregate aggregate, const Tensor &x, const Tensor &phi,
                const Tensor &alpha, const Tensor &beta,
                const OptTensor &weight, int64_t n, Str layout, bool tf32,
                double normEps, double preEps, double postMult, Str mode,
                int64_t iters, double eps) {
  auto [h, ms] = project(x, phi, weight, n, layout, tf32);
  auto [pre, post, logits] =
      scale(h, ms, alpha, beta, n, normEps, preEps, postMult);
  Tensor P = sinkhorn(logits, n, mode, iters, eps);
  Tensor y = aggregate(x, pre, n, layout);
  return {y, post, P, h, ms, pre, logits};
}

PreOut pre_saved_ref(const Tensor &x, const Tensor &phi, const Tensor &alpha,
                     const Tensor &beta, const OptTensor &weight, int64_t n,
                     Str layout, bool tf32, double normEps, double preEps,
                     double postMult, Str mode, int64_t iters, double eps) {
  checkPre("pre", x, phi, alpha, beta, weight, n, layout, normEps, preEps,
           postMult, mode, iters, eps);
  return preSteps(project_ref, scale_ref, sinkhorn_ref, aggregate_ref, x, phi,
                  alpha, beta, weight, n, layout, tf32, normEps, preEps,
                  postMult, mode, iters, eps);
}

std::tuple<Tensor, Tensor, Tensor>
pre_ref(const Tensor &x, const Tensor &phi, const Tensor &alpha,
        const Tensor &beta, const OptTensor &weight, int64_t n, Str layout,
        bool tf32, double normEps, double preEps, double postMult, Str mode,
        int64_t iters, double eps) {
  auto out = pre_saved_ref(x, phi, alpha, beta, weight, n, layout, tf32,
                           normEps, preEps, postMult, mode, iters, eps);
  return {std::get<0>(out), std::get<1>(out), std::get<2>(out)};
}

/// The fused kernel (three launches instead of six); `save` keeps h, ms,
/// pre and logits for the gradient, else they stay in the workspace.
PreOut preCuda(const Tensor &x, const Tensor &phi, const Tensor &alpha,
               const Tensor &beta, const OptTensor &weight, int64_t n,
               Str layout, bool tf32, double normEps, double preEps,
               double postMult, Str mode, int64_t iters, double eps, bool save) {
  Checker c = checkPre("pre", x, phi, alpha, beta, weight, n, layout, normEps,
                       preEps, postMult, mode, iters, eps);
  int64_t M = c.M, N = 2 * n + n * n;
  // One kernel spec has one parameter dtype: phi, alpha, beta and weight
  // of different dtypes run as the four ops (each has its own kernel).
  bool oneParamType = phi.scalar_type() == beta.scalar_type() &&
                      (!weight || weight->scalar_type() == phi.scalar_type());
  // The tail's Sinkhorn thread holds the n x n plan and its scalings in
  // registers: for n >= 6 that caps the tail at 2 blocks per SM, and past a
  // few hundred tokens the four kernels are faster (H100, n = 8, M = 32768,
  // C = 7168: layer forward 6385 us fused, 5464 us as four kernels). Host
  // time, what fusing saves, matters only at small M; both paths give the
  // same bits.
  bool fuse = oneParamType && (n <= 4 || M <= kFusedPreMaxTokens);
  const mhc::rt::LoadedKernel *k = nullptr;
  Tensor w = orUndefined(weight);
  if (fuse) {
    // The fields of its parts: project's (one param dtype, phi's), then
    // scale's and sinkhorn's attributes.
    auto spec = projectSpec(mhc::Direction::Forward, n, x, layout, c.C, phi, weight, tf32);
    spec.op = mhc::OpKind::Pre;
    scaleFields(spec, normEps, preEps, postMult);
    sinkhornFields(spec, mode, iters, eps);
    k = select("pre", spec, {&x, &phi, &w, &alpha, &beta}, M);
  }
  if (!k)
    return preSteps(project_cuda, scale_cuda, sinkhorn_cuda, aggregate_cuda, x,
                    phi, alpha, beta, weight, n, layout, tf32, normEps, preEps,
                    postMult, mode, iters, eps);
  auto mixing = x.options().dtype(mhc::ref::mixingType(x.scalar_type()));
  Tensor y = at::empty({M, c.C}, x.options());
  Tensor post = at::empty({M, n}, mixing);
  Tensor P = at::empty({M, n, n}, mixing);
  Tensor h, ms, pre, logits;
  if (save) {
    h = at::empty({M, N}, mixing);
    ms = at::empty({M}, mixing);
    pre = at::empty({M, n}, mixing);
    logits = at::empty({M, n, n}, mixing);
  }
  auto kept = [&](const Tensor &t) { return save ? &t : nullptr; };
  launch(*k, M, {{"x", &x}, {"phi", &phi}, {"weight", &w}, {"alpha", &alpha},
                 {"beta", &beta}, {"h", kept(h)}, {"ms", kept(ms)},
                 {"pre", kept(pre)}, {"post", &post}, {"logits", kept(logits)},
                 {"P", &P}, {"y", &y}},
         x);
  return {y, post, P, h, ms, pre, logits};
}

PreOut pre_saved_cuda(const Tensor &x, const Tensor &phi, const Tensor &alpha,
                      const Tensor &beta, const OptTensor &weight, int64_t n,
                      Str layout, bool tf32, double normEps, double preEps,
                      double postMult, Str mode, int64_t iters, double eps) {
  return preCuda(x, phi, alpha, beta, weight, n, layout, tf32, normEps, preEps,
                 postMult, mode, iters, eps, /*save=*/true);
}

std::tuple<Tensor, Tensor, Tensor>
pre_cuda(const Tensor &x, const Tensor &phi, const Tensor &alpha,
         const Tensor &beta, const OptTensor &weight, int64_t n, Str layout,
         bool tf32, double normEps, double preEps, double postMult, Str mode,
         int64_t iters, double eps) {
  auto out = preCuda(x, phi, alpha, beta, weight, n, layout, tf32, normEps,
                     preEps, postMult, mode, iters, eps, /*save=*/false);
  return {std::get<0>(out), std::get<1>(out), std::get<2>(out)};
}

} // namespace

TORCH_LIBRARY(mhc, m) {
  m.def("project(Tensor x, Tensor phi, Tensor? weight, int n, str layout, bool tf32) -> (Tensor, Tensor)");
  m.def("project_backward(Tensor gh, Tensor gms, Tensor x, Tensor phi, Tensor? weight, int n, str layout, bool tf32) -> (Tensor, Tensor, Tensor)");
  m.def("scale(Tensor h, Tensor ms, Tensor alpha, Tensor beta, int n, float norm_eps, float pre_eps, float post_mult) -> (Tensor, Tensor, Tensor)");
  m.def("scale_backward(Tensor gpre, Tensor gpost, Tensor glogits, Tensor h, Tensor ms, Tensor alpha, Tensor beta, int n, float norm_eps, float pre_eps, float post_mult) -> (Tensor, Tensor, Tensor, Tensor)");
  m.def("sinkhorn(Tensor logits, int n, str mode, int iters, float eps) -> Tensor");
  m.def("sinkhorn_backward(Tensor gP, Tensor logits, int n, str mode, int iters, float eps) -> Tensor");
  m.def("aggregate(Tensor x, Tensor pre, int n, str layout) -> Tensor");
  m.def("aggregate_backward(Tensor gy, Tensor x, Tensor pre, int n, str layout) -> (Tensor, Tensor)");
  m.def("expand_combine(Tensor f, Tensor post, Tensor x, Tensor P, Tensor? bias, int n, str layout) -> Tensor");
  m.def("expand_combine_backward(Tensor gout, Tensor f, Tensor post, Tensor x, Tensor P, Tensor? bias, int n, str layout) -> (Tensor, Tensor, Tensor, Tensor, Tensor)");
  // One layer's pre step (project -> scale -> sinkhorn -> aggregate): one
  // call and, on CUDA, one fused kernel. pre_saved also returns what the
  // gradient needs (h, ms, pre, logits); autograd calls it (Autograd.cpp).
  m.def("pre(Tensor x, Tensor phi, Tensor alpha, Tensor beta, Tensor? weight, int n, str layout, bool tf32, "
        "float norm_eps, float pre_eps, float post_mult, str mode, int iters, float eps) -> (Tensor, Tensor, Tensor)");
  m.def("pre_saved(Tensor x, Tensor phi, Tensor alpha, Tensor beta, Tensor? weight, int n, str layout, bool tf32, "
        "float norm_eps, float pre_eps, float post_mult, str mode, int iters, float eps) -> "
        "(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)");
}

// The reference is the CPU implementation (and the CUDA fallback, above).
TORCH_LIBRARY_IMPL(mhc, CPU, m) {
  m.impl("project", &project_ref);
  m.impl("project_backward", &project_backward_ref);
  m.impl("scale", &scale_ref);
  m.impl("scale_backward", &scale_backward_ref);
  m.impl("sinkhorn", &sinkhorn_ref);
  m.impl("sinkhorn_backward", &sinkhorn_backward_ref);
  m.impl("aggregate", &aggregate_ref);
  m.impl("aggregate_backward", &aggregate_backward_ref);
  m.impl("expand_combine", &expand_combine_ref);
  m.impl("expand_combine_backward", &expand_combine_backward_ref);
  m.impl("pre", &pre_ref);
  m.impl("pre_saved", &pre_saved_ref);
}

TORCH_LIBRARY_IMPL(mhc, CUDA, m) {
  m.impl("project", &project_cuda);
  m.impl("project_backward", &project_backward_cuda);
  m.impl("scale", &scale_cuda);
  m.impl("scale_backward", &scale_backward_cuda);
  m.impl("sinkhorn", &sinkhorn_cuda);
  m.impl("sinkhorn_backward", &sinkhorn_backward_cuda);
  m.impl("aggregate", &aggregate_cuda);
  m.impl("aggregate_backward", &aggregate_backward_cuda);
  m.impl("expand_combine", &expand_combine_cuda);
  m.impl("expand_combine_backward", &expand_combine_backward_cuda);
  m.impl("pre", &pre_cuda);
  m.impl("pre_saved", &pre_saved_cuda);
}
