//===- KernelPath.cpp - generated kernel or reference, and launch ---------===//

#include "KernelPath.h"
#include "Specs.h"
#include "Stats.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>
#include <string>

namespace mhc::ops {

namespace {

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

} // namespace

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
      // A loaded kernel passed unsupportedReason when it was loaded: a warm
      // call skips it (the seam's spec checks its parts, every call).
      kernel = rt.loadedKernel(spec, first.get_device());
      if (!kernel) {
        reason = mhc::unsupportedReason(spec);
        if (reason.empty())
          kernel = &rt.kernel(spec, first.get_device());
      }
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

} // namespace mhc::ops
