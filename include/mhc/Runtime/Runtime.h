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
  int deviceOrdinal = 0;
  /// The context the module is loaded in (the device's primary context):
  /// launch() makes it current on the calling thread when it is not.
  CUcontext context = nullptr;
  /// Per launch, per parameter: the buffer index, or -1 for M, -2 for S,
  /// -3 for the grid barriers' words ("sync"), or a tensor map's (below).
  std::vector<std::vector<int>> paramBuffers;
  /// The launches' tensor-map parameters: the buffer index and the shape.
  struct TensorMapParam {
    int buffer;
    TensorMapShape shape;
  };
  std::vector<TensorMapParam> tensorMaps;
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
  /// The kernel for `spec` when it is already loaded on the device, else
  /// nullptr: the per-call fast path (a structural hash and one map lookup,
  /// no strings). Only kernel() loads, and only specs codegen supports.
  const LoadedKernel *loadedKernel(const KernelSpec &spec, int deviceOrdinal);

  /// Launches every launch of `kernel` for M tokens with split count
  /// S = split(kernel, M), which the caller has already used to size the
  /// buffers. `buffers[i]` is the device address of manifest buffer i
  /// (inputs, outputs and workspaces, sized by their extents at M and S),
  /// 16-byte aligned. Makes the kernel's context current on the calling
  /// thread first (any thread may launch: the autograd engine's, a user's).
  void launch(const LoadedKernel &kernel, int64_t M, int64_t S,
              void *const *buffers, size_t count, CUstream stream);

  /// The split count the kernel uses for M tokens.
  static int64_t split(const LoadedKernel &kernel, int64_t M) {
    return kernel.manifest.split.splitFor(M);
  }

  KernelCache &cache() { return diskCache; }
  /// The codegen target of a device (see Driver::archOf).
  std::string archOf(int deviceOrdinal);

  /// Grid-barrier slots per device: concurrent cooperative launches on
  /// this many streams of one device (a stream keeps its slot).
  static constexpr int kSyncSlots = 1024;
  /// Bytes per slot (kSyncWords u32, padded to their own 128-byte line).
  static constexpr int kSyncSlotBytes = 128;

private:
  Runtime();
  /// The sync words of (device, stream) for cooperative launches: the
  /// device's slots are allocated and zeroed when its first cooperative
  /// kernel loads; a stream takes the next free slot on its first launch.
  /// The kernels leave count at 0, so a slot needs no reset between
  /// launches (docs/design/serve.md).
  void allocateSyncSlots(int deviceOrdinal);
  void *syncWords(int deviceOrdinal, CUstream stream);
  /// Starts one launch of `l`: plain, cooperative, or (LaunchDesc::
  /// programmatic) through cuLaunchKernelEx with programmatic stream
  /// serialization (and cooperative) attributes.
  static CUresult start(const LaunchDesc &l, CUfunction fn, unsigned grid,
                        unsigned shared, CUstream stream, void **params);
  /// The device's primary context, retained once per device.
  CUcontext contextOf(int deviceOrdinal);
  KernelCache diskCache;
  std::mutex mutex;
  std::map<std::pair<int, std::string>, std::unique_ptr<LoadedKernel>> loaded;
  /// (device, structural hash) -> kernel: the per-call fast path.
  std::map<std::pair<int, uint64_t>, const LoadedKernel *> fast;
  std::map<int, std::string> arches;
  std::map<int, CUdeviceptr> syncBase;
  std::map<std::pair<int, CUstream>, int> syncSlot;
  std::map<int, int> syncSlotsUsed;
  std::map<int, CUcontext> contexts;
};

} // namespace mhc::rt

#endif // MHC_RUNTIME_RUNTIME_H
