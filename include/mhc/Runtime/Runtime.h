//===- Runtime.h - load and launch compiled mhc kernels ---------*- C++ -*-===//
//
// The runtime keeps one loaded module per (device, kernel spec) in memory,
// fetching kernels from the KernelCache (a bundle, the disk, else the JIT),
// and launches an op's launch sequence on the caller's stream. No MLIR and no
// PyTorch here.
//
//===----------------------------------------------------------------------===//

#ifndef MHC_RUNTIME_RUNTIME_H
#define MHC_RUNTIME_RUNTIME_H

#include "mhc/Runtime/CudaDriver.h"
#include "mhc/Runtime/KernelCache.h"

#include <map>
#include <memory>
#include <vector>

namespace mhc::rt {

struct LoadedKernel {
  KernelSpec spec;
  Manifest manifest;
  std::vector<CUfunction> functions; // one per manifest launch
  /// Per launch, per parameter: the buffer index, or -1 for M, -2 for S.
  std::vector<std::vector<int>> paramBuffers;
  /// Buffer index -> position in the manifest's buffer list, by name.
  int bufferIndex(const std::string &name) const;
};

class Runtime {
public:
  /// The process-wide runtime (cache settings from the environment).
  static Runtime &get();

  /// The kernel for `spec` on device `deviceOrdinal`, loaded on first use.
  /// Throws Error when it cannot be compiled or loaded.
  const LoadedKernel &kernel(const KernelSpec &spec, int deviceOrdinal);
  /// The kernel for `spec` if it is loaded already, else nullptr (one
  /// lookup, nothing compiled or loaded: the per-call path of a warm op).
  const LoadedKernel *loadedKernel(const KernelSpec &spec, int deviceOrdinal);

  /// Launches every launch of `kernel` for M tokens with split count
  /// S = split(kernel, M), which the caller has already used to size the
  /// buffers. `buffers[i]` is the device address of manifest buffer i
  /// (inputs, outputs and workspaces, sized by their extents at M and S),
  /// 16-byte aligned.
  void launch(const LoadedKernel &kernel, int64_t M, int64_t S,
              void *const *buffers, size_t count, CUstream stream);

  /// The split count the kernel uses for M tokens.
  static int64_t split(const LoadedKernel &kernel, int64_t M) {
    return kernel.manifest.split.splitFor(M);
  }

  KernelCache &cache() { return diskCache; }
  /// The codegen target of a device (see Driver::archOf).
  std::string archOf(int deviceOrdinal);

private:
  Runtime();
  KernelCache diskCache;
  std::mutex mutex;
  std::map<std::pair<int, std::string>, std::unique_ptr<LoadedKernel>> loaded;
  /// (device, structural hash) -> kernel: the per-call fast path.
  std::map<std::pair<int, uint64_t>, const LoadedKernel *> fast;
  std::map<int, std::string> arches;
};

} // namespace mhc::rt

#endif // MHC_RUNTIME_RUNTIME_H
