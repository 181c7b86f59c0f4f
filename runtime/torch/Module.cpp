//===- Module.cpp - the mhc._C Python module -------------------------------===//
//
// Importing mhc._C registers torch.ops.mhc.* (Ops.cpp). The few functions
// here expose the runtime's state to Python: where the cache is, which
// compiler it runs, and the canonical spec/kernel name of a spec string;
// and eager entry points of the forward ops (below).
//
//===----------------------------------------------------------------------===//

#include "Checks.h"
#include "OpHandles.h"
#include "Reference.h"
#include "SpecOf.h"
#include "Stats.h"

#include "mhc/Runtime/Runtime.h"

#include <torch/extension.h>

namespace {
using mhc::ops::OptTensor;

/// n of `t`, argument `arg` of torch op `op`, by the op's contract (the
/// rule looked up once per entry point): every eager entry point derives n
/// here. python/mhc/ops.py only calls them with a 3-D x (or logits).
template <const char *op, const char *arg>
int64_t streamsOf(const at::Tensor &t, const std::string &layout = "nc") {
  static const mhc::ArgRule &rule = mhc::ops::ruleOf(op, arg);
  return mhc::ops::streamsOf(rule, t, layout);
}
constexpr char kProject[] = "project", kSinkhorn[] = "sinkhorn",
               kAggregate[] = "aggregate", kCombine[] = "expand_combine",
               kPre[] = "pre", kPostPre[] = "post_pre", kX[] = "x",
               kLogits[] = "logits";

OptTensor contiguous(const OptTensor &t) {
  return t ? OptTensor(t->contiguous()) : std::nullopt;
}

/// Where the runtime's kernels came from (KernelCache::Counters); zeros
/// while the runtime is not set up (an invalid environment variable).
void addKernelSources(pybind11::dict &d) {
  int64_t bundle = 0, disk = 0, compiled = 0;
  try {
    const auto &c = mhc::rt::Runtime::get().cache().counters();
    bundle = c.bundleHits, disk = c.diskHits, compiled = c.compiles;
  } catch (const mhc::rt::Error &) {
  }
  d["bundle_hits"] = bundle;
  d["disk_hits"] = disk;
  d["compiles"] = compiled;
}

mhc::KernelSpec parseSpec(const std::string &spec) {
  std::string error;
  auto s = mhc::KernelSpec::parse(spec, &error);
  if (!s)
    throw std::invalid_argument("invalid kernel spec: " + error);
  return *s;
}

void warnInPython(const std::string &message) {
  pybind11::gil_scoped_acquire gil;
  if (PyErr_WarnEx(PyExc_UserWarning, message.c_str(), 1) != 0)
    PyErr_Clear(); // warnings-as-errors cannot unwind through the dispatcher
}
} // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "mhc runtime: torch.ops.mhc.* and runtime introspection";
  mhc::stats::warningHook = &warnInPython;
  m.def("cache_dir", [] {
    return mhc::rt::KernelCache::fromEnvironment().directory;
  }, "The kernel cache directory ($MHC_CACHE_DIR, else ~/.cache/mhc).");
  m.def("compiler", [] {
    return mhc::rt::KernelCache::fromEnvironment().compiler;
  }, "The kernel compiler the JIT runs ($MHC_COMPILER, else mhc-compile).");
  m.def("stats", [] {
    pybind11::dict d;
    d["kernel_calls"] = mhc::stats::kernelCalls.load();
    d["reference_calls"] = mhc::stats::referenceCalls.load();
    addKernelSources(d);
    return d;
  }, "Op calls served by generated kernels and by the reference path (CUDA), and "
     "kernels taken from bundles, from the disk cache and compiled.");
  // The same dispatcher ops as torch.ops.mhc.* (autograd, CUDA or CPU
  // kernels, dispatch modes), called through their typed handles instead of
  // torch.ops' boxed arguments, with the inputs made contiguous and n read
  // from the shapes here (scale's comes from Python): at small M a call is bound by host time, and the
  // boxed call and the Python API's conversions were several microseconds
  // of it. python/mhc/ops.py uses them in eager mode for the common ranks
  // when no argument has a __torch_function__ override; otherwise (and
  // under torch.compile) it calls torch.ops.mhc.*.
  m.def("project", [](const at::Tensor &x, const at::Tensor &phi, const OptTensor &weight,
                      const std::string &layout, bool tf32) {
    pybind11::gil_scoped_release noGil;
    return mhc::ops::projectOp().call(x.contiguous(), phi.contiguous(), contiguous(weight),
                                      streamsOf<kProject, kX>(x, layout), layout, tf32);
  }, "torch.ops.mhc.project for 3-D x, n from x and the layout (eager entry point).");
  m.def("scale", [](const at::Tensor &h, const at::Tensor &ms, const at::Tensor &alpha,
                    const at::Tensor &beta, int64_t n, double normEps, double preEps,
                    double postMult) {
    pybind11::gil_scoped_release noGil;
    return mhc::ops::scaleOp().call(h.contiguous(), ms.contiguous(), alpha.contiguous(),
                                    beta.contiguous(), n, normEps, preEps, postMult);
  }, "torch.ops.mhc.scale for 2-D h (eager entry point).");
  m.def("sinkhorn", [](const at::Tensor &logits, const std::string &mode, int64_t iters,
                       double eps) {
    pybind11::gil_scoped_release noGil;
    return mhc::ops::sinkhornOp().call(logits.contiguous(), streamsOf<kSinkhorn, kLogits>(logits), mode, iters, eps);
  }, "torch.ops.mhc.sinkhorn for 3-D logits, n from the last dim (eager entry point).");
  m.def("aggregate", [](const at::Tensor &x, const at::Tensor &pre, const std::string &layout) {
    pybind11::gil_scoped_release noGil;
    return mhc::ops::aggregateOp().call(x.contiguous(), pre.contiguous(), streamsOf<kAggregate, kX>(x, layout),
                                        layout);
  }, "torch.ops.mhc.aggregate for 3-D x, n from x and the layout (eager entry point).");
  m.def("pre", [](const at::Tensor &x, const at::Tensor &phi, const at::Tensor &alpha,
                  const at::Tensor &beta, const OptTensor &weight, const std::string &layout,
                  bool tf32, double normEps, double preEps, double postMult,
                  const std::string &mode, int64_t iters, double eps) {
    pybind11::gil_scoped_release noGil;
    return mhc::ops::preOp().call(
        x.contiguous(), phi.contiguous(), alpha.contiguous(), beta.contiguous(),
        contiguous(weight), streamsOf<kPre, kX>(x, layout), layout, tf32, normEps, preEps, postMult,
        mode, iters, eps);
  }, "torch.ops.mhc.pre for 3-D x, n from x and the layout (eager entry point).");
  m.def("expand_combine", [](const at::Tensor &f, const at::Tensor &post, const at::Tensor &x,
                             const at::Tensor &P, const OptTensor &bias,
                             const std::string &layout) {
    pybind11::gil_scoped_release noGil;
    return mhc::ops::expandCombineOp().call(
        f.contiguous(), post.contiguous(), x.contiguous(), P.contiguous(), contiguous(bias),
        streamsOf<kCombine, kX>(x, layout), layout);
  }, "torch.ops.mhc.expand_combine for 3-D x, n from x and the layout (eager entry point).");
  m.def("post_pre", [](const at::Tensor &f, const at::Tensor &post, const at::Tensor &x,
                       const at::Tensor &P, const OptTensor &bias, const at::Tensor &phi,
                       const at::Tensor &alpha, const at::Tensor &beta, const OptTensor &weight,
                       const std::string &layout, bool tf32, double normEps, double preEps,
                       double postMult, const std::string &mode, int64_t iters, double eps) {
    pybind11::gil_scoped_release noGil;
    return mhc::ops::postPreOp().call(
        f.contiguous(), post.contiguous(), x.contiguous(), P.contiguous(), contiguous(bias),
        phi.contiguous(), alpha.contiguous(), beta.contiguous(), contiguous(weight),
        streamsOf<kPostPre, kX>(x, layout), layout, tf32, normEps, preEps, postMult, mode, iters,
        eps);
  }, "torch.ops.mhc.post_pre for 3-D x, n from x and the layout (eager entry point).");
  // The inference ops' (out=; python/mhc/inference.py): the out= tensors
  // are passed as they are (the op checks them; a copy would not be theirs).
  m.def("post_pre_out", [](const at::Tensor &f, const at::Tensor &post, const at::Tensor &x,
                           const at::Tensor &P, const OptTensor &bias, const at::Tensor &phi,
                           const at::Tensor &alpha, const at::Tensor &beta,
                           const OptTensor &weight, const std::string &layout, bool tf32,
                           double normEps, double preEps, double postMult,
                           const std::string &mode, int64_t iters, double eps,
                           const at::Tensor &xNext, const at::Tensor &y,
                           const at::Tensor &postNext, const at::Tensor &PNext) {
    pybind11::gil_scoped_release noGil;
    mhc::ops::postPreOutOp().call(
        f.contiguous(), post.contiguous(), x.contiguous(), P.contiguous(), contiguous(bias),
        phi.contiguous(), alpha.contiguous(), beta.contiguous(), contiguous(weight),
        streamsOf<kPostPre, kX>(x, layout), layout, tf32, normEps, preEps, postMult, mode, iters,
        eps, xNext, y, postNext, PNext);
  }, "torch.ops.mhc.post_pre_out for 3-D x, n from x and the layout (eager entry point).");
  m.def("pre_out", [](const at::Tensor &x, const at::Tensor &phi, const at::Tensor &alpha,
                      const at::Tensor &beta, const OptTensor &weight, const std::string &layout,
                      bool tf32, double normEps, double preEps, double postMult,
                      const std::string &mode, int64_t iters, double eps, const at::Tensor &y,
                      const at::Tensor &post, const at::Tensor &P) {
    pybind11::gil_scoped_release noGil;
    mhc::ops::preOutOp().call(x.contiguous(), phi.contiguous(), alpha.contiguous(),
                              beta.contiguous(), contiguous(weight),
                              streamsOf<kPre, kX>(x, layout), layout, tf32, normEps, preEps,
                              postMult, mode, iters, eps, y, post, P);
  }, "torch.ops.mhc.pre_out for 3-D x, n from x and the layout (eager entry point).");
  m.def("expand_combine_out", [](const at::Tensor &f, const at::Tensor &post,
                                 const at::Tensor &x, const at::Tensor &P,
                                 const OptTensor &bias, const std::string &layout,
                                 const at::Tensor &out) {
    pybind11::gil_scoped_release noGil;
    mhc::ops::expandCombineOutOp().call(f.contiguous(), post.contiguous(), x.contiguous(),
                                        P.contiguous(), contiguous(bias),
                                        streamsOf<kCombine, kX>(x, layout), layout, out);
  }, "torch.ops.mhc.expand_combine_out for 3-D x, n from x and the layout (eager entry point).");
  m.attr("MAX_STREAMS") = mhc::ops::kMaxStreams;
  // The ops' contract (mhc/Support/OpContract.h), for the Python package.
  m.def("num_logits", &mhc::numLogits, "N = 2n + n^2, the mixing logits per token.");
  m.def("requested_specs", &mhc::ops::requestedSpecs, pybind11::arg("op"), pybind11::arg("args"),
        pybind11::arg("arch"),
        "The canonical specs torch.ops.mhc.<op>'s CUDA entry would ask for, called with the "
        "schema's arguments `args` on a GPU of `arch` (SpecOf.cpp); none for M = 0.");
  m.def("pre_step_fuses", &mhc::preStepFuses,
        "Whether torch.ops.mhc.pre (and mhc-fuse-pre) runs one layer's pre step as the "
        "fused kernel for n streams and M tokens (M < 0: not known).");
  m.def("arg_names", [](const std::string &op) {
    const std::vector<mhc::ArgRule> *rules = mhc::argRules(op);
    if (!rules)
      throw std::invalid_argument("no op mhc." + op);
    std::vector<std::string> names;
    for (const mhc::ArgRule &rule : *rules)
      names.emplace_back(rule.name);
    return names;
  }, "The tensor arguments of torch.ops.mhc.<op>, in the order the op checks them.");
  m.def("mixing_dtype", &mhc::ref::mixingType,
        "The dtype of the ops' mixing outputs (h, ms, pre, post, logits, P) for an "
        "activation or mixing input of this dtype (the fake kernels' rule).");
  m.def("kernel_name", [](const std::string &spec) {
    std::string error;
    auto s = mhc::KernelSpec::parse(spec, &error);
    if (!s)
      throw std::invalid_argument("invalid kernel spec: " + error);
    return s->kernelName();
  }, "The kernel name of a canonical spec string.");
  // Prebuilt kernel bundles (docs/USAGE.md, "The kernel bundle").
  m.def("load_bundle", [](const std::string &dir) {
    return mhc::rt::Runtime::get().cache().addBundle(dir);
  }, "Adds a bundle directory, searched before the cache and the compiler; returns "
     "its kernel count. Raises RuntimeError when it has no valid index.json.");
  m.def("bundles", [] { return mhc::rt::Runtime::get().cache().bundles(); },
        "The bundle directories in use: MHC_BUNDLE_PATH's, then load_bundle's.");
  m.def("resolve_kernel", [](const std::string &spec) {
    mhc::KernelSpec s = parseSpec(spec);
    mhc::rt::CompiledKernel k;
    {
      pybind11::gil_scoped_release noGil;
      k = mhc::rt::Runtime::get().cache().get(s);
    }
    static const char *sources[] = {"disk", "compiled", "bundle"};
    pybind11::dict d;
    d["source"] = sources[k.source];
    d["path"] = k.path;
    d["compiler"] = k.compiler;
    return d;
  }, "Finds (bundle, disk cache) or compiles the kernel of a spec, as a CUDA call "
     "would, without a GPU: {'source', 'path', 'compiler'}. Raises RuntimeError "
     "naming the spec when there is none.");
  m.def("canonical_spec", [](const std::string &spec) { return parseSpec(spec).canonical(); },
        "The canonical form of a spec string.");
  m.def("unsupported_reason", [](const std::string &spec) {
    std::string error;
    auto s = mhc::KernelSpec::parse(spec, &error);
    if (!s)
      throw std::invalid_argument("invalid kernel spec: " + error);
    return mhc::unsupportedReason(*s);
  }, "Why codegen cannot build a spec ('' when it can).");
}
