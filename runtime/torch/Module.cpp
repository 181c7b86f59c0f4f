//===- Module.cpp - the mhc._C Python module -------------------------------===//
//
// Importing mhc._C registers torch.ops.mhc.* (Ops.cpp). The few functions
// here expose the runtime's state to Python: where the cache is, which
// compiler it runs, and the canonical spec/kernel name of a spec string.
//
//===----------------------------------------------------------------------===//

#include "Stats.h"

#include "mhc/Runtime/Runtime.h"

#include <torch/extension.h>

namespace {
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
    return d;
  }, "Op calls served by generated kernels and by the reference path (CUDA).");
  m.def("kernel_name", [](const std::string &spec) {
    std::string error;
    auto s = mhc::KernelSpec::parse(spec, &error);
    if (!s)
      throw std::invalid_argument("invalid kernel spec: " + error);
    return s->kernelName();
  }, "The kernel name of a canonical spec string.");
  m.def("unsupported_reason", [](const std::string &spec) {
    std::string error;
    auto s = mhc::KernelSpec::parse(spec, &error);
    if (!s)
      throw std::invalid_argument("invalid kernel spec: " + error);
    return mhc::unsupportedReason(*s);
  }, "Why codegen cannot build a spec ('' when it can).");
}
