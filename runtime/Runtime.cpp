//===- Runtime.cpp - load and launch compiled mhc kernels -----------------===//

#include "mhc/Runtime/Runtime.h"

#include <cstdio>

namespace mhc::rt {

namespace {
// CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES of cuda.h.
constexpr int kMaxDynamicSharedSizeBytes = 8;
// CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE of cuda.h.
constexpr int kCooperativeLaunchTooLarge = 720;
struct Descriptor {
  void *allocated, *aligned;
  int64_t offset, size, stride;
};
// Parameter index of a launch's tensor map t (LoadedKernel::tensorMaps):
// kTensorMapBase - t.
constexpr int kTensorMapBase = -1000;
struct alignas(64) TensorMap {
  unsigned char bytes[128];
};

// cuda.h's enum values.
int tensorMapType(DType t) {
  switch (t) {
  case DType::F16: return 6;
  case DType::F32: return 7;
  case DType::BF16: return 9;
  }
  return -1;
}

/// A tensor-map parameter (Manifest.h's TensorMapShape): the buffer as
/// [M, perToken], its tokens first, first + every, ... as the map's rows
/// (every token rows apart), from the 16-byte boundary at or below the
/// first token's row (`shift` elements of the token before it as the map's
/// first columns), in granules of `granule` elements where it has them.
/// Zeros past the map's rows and columns; in granules, the rest of a row's
/// last granule is the next token's (Manifest.h). A map with no
/// token (M <= first) maps token 0's row instead: the kernels read it only
/// as rows past M, which they mask.
void encodeTensorMap(TensorMap &map, const LoadedKernel::TensorMapParam &t,
                     const BufferDesc &b, void *address, int64_t M,
                     const std::string &entry) {
  Driver &d = Driver::get();
  if (!d.cuTensorMapEncodeTiled)
    throw Error("mhc: " + entry + " needs cuTensorMapEncodeTiled, which this "
                "CUDA driver lacks");
  const TensorMapShape &s = t.shape;
  const unsigned long long width = byteWidth(b.dtype), row = b.elems.perToken * width;
  unsigned long long tokens = M > s.first ? (M - s.first + s.every - 1) / s.every : 0;
  unsigned long long start = tokens ? s.first * row / 16 * 16 : 0;
  unsigned long long shift = tokens ? s.first * row % 16 / width : 0;
  unsigned long long cols = b.elems.perToken + shift, G = s.granule;
  // 2-D [tokens][cols], or with granules 3-D [tokens][granules][G].
  unsigned long long dims[3] = {cols, tokens ? tokens : 1, 1};
  unsigned long long strides[2] = {s.every * row, 0};
  unsigned box[3] = {static_cast<unsigned>(s.width), static_cast<unsigned>(s.rows), 1};
  if (G) {
    dims[0] = G, dims[1] = (cols + G - 1) / G, dims[2] = tokens ? tokens : 1;
    strides[0] = G * width, strides[1] = s.every * row;
    box[0] = static_cast<unsigned>(G), box[1] = static_cast<unsigned>(s.width / G);
    box[2] = static_cast<unsigned>(s.rows);
  }
  unsigned unit[3] = {1, 1, 1};
  d.check(d.cuTensorMapEncodeTiled(&map, tensorMapType(b.dtype), G ? 3 : 2,
                                   static_cast<char *>(address) + start, dims,
                                   strides, box, unit, /*INTERLEAVE_NONE*/ 0,
                                   /*SWIZZLE_128B or NONE*/ s.swizzled ? 3 : 0,
                                   /*L2_PROMOTION_L2_128B*/ 2,
                                   /*FLOAT_OOB_FILL_NONE*/ 0),
          "encoding the tensor map of '" + b.name + "' for " + entry +
              " (M = " + std::to_string(M) + ")");
}
} // namespace

int LoadedKernel::bufferIndex(const std::string &name) const {
  for (size_t i = 0; i < manifest.buffers.size(); ++i)
    if (manifest.buffers[i].name == name)
      return static_cast<int>(i);
  return -1;
}

Runtime &Runtime::get() {
  static Runtime runtime;
  return runtime;
}

Runtime::Runtime() : diskCache(KernelCache::fromEnvironment()) {}

std::string Runtime::archOf(int deviceOrdinal) {
  std::lock_guard<std::mutex> lock(mutex);
  auto it = arches.find(deviceOrdinal);
  if (it != arches.end())
    return it->second;
  Driver &d = Driver::get();
  std::string arch = d.archOf(d.device(deviceOrdinal));
  arches[deviceOrdinal] = arch;
  return arch;
}

CUcontext Runtime::contextOf(int deviceOrdinal) {
  std::lock_guard<std::mutex> lock(mutex);
  CUcontext &ctx = contexts[deviceOrdinal];
  if (!ctx) {
    Driver &d = Driver::get();
    ctx = d.primaryContext(d.device(deviceOrdinal));
  }
  return ctx;
}

const LoadedKernel *Runtime::loadedKernel(const KernelSpec &spec,
                                          int deviceOrdinal) {
  uint64_t structural = spec.structuralHash();
  std::lock_guard<std::mutex> lock(mutex);
  auto hit = fast.find({deviceOrdinal, structural});
  return hit != fast.end() ? hit->second : nullptr;
}

const LoadedKernel &Runtime::kernel(const KernelSpec &spec, int deviceOrdinal) {
  if (const LoadedKernel *hit = loadedKernel(spec, deviceOrdinal))
    return *hit;
  uint64_t structural = spec.structuralHash();
  std::string canonical = spec.canonical();
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = loaded.find({deviceOrdinal, canonical});
    if (it != loaded.end()) {
      fast[{deviceOrdinal, structural}] = it->second.get();
      return *it->second;
    }
  }
  // Compile (or read from disk) outside the lock: the cache serialises itself.
  CompiledKernel compiled = diskCache.get(spec);
  Driver &d = Driver::get();
  auto kernel = std::make_unique<LoadedKernel>();
  kernel->context = contextOf(deviceOrdinal);
  d.makeCurrent(kernel->context);
  kernel->spec = spec;
  kernel->manifest = compiled.manifest;
  kernel->deviceOrdinal = deviceOrdinal;
  CUmodule module = nullptr;
  d.check(d.cuModuleLoadData(&module, compiled.cubin.data()),
          "loading kernel " + spec.kernelName() + " [" + canonical + "]");
  for (const LaunchDesc &l : kernel->manifest.launches) {
    CUfunction fn = nullptr;
    d.check(d.cuModuleGetFunction(&fn, module, l.entry.c_str()),
            "finding " + l.entry + " [" + canonical + "]");
    // Shared memory past the default 48 KB is opt-in per function.
    if (l.dynamicSharedBytes > 48 * 1024)
      d.check(d.cuFuncSetAttribute(fn, kMaxDynamicSharedSizeBytes,
                                   static_cast<int>(l.dynamicSharedBytes)),
              "reserving " + std::to_string(l.dynamicSharedBytes) +
                  " bytes of shared memory for " + l.entry);
    kernel->functions.push_back(fn);
    std::vector<int> indices;
    for (const std::string &p : l.params) {
      if (const char *tmap = tensorMapBuffer(p)) {
        LoadedKernel::TensorMapParam t{kernel->bufferIndex(tmap), {}};
        parseTensorMapShape(p, t.shape); // (ManifestRead checked it)
        indices.push_back(kTensorMapBase - static_cast<int>(kernel->tensorMaps.size()));
        kernel->tensorMaps.push_back(t);
      } else {
        indices.push_back(p == "M"         ? -1
                          : p == "S"         ? -2
                          : p == kSyncParam  ? -3
                                             : kernel->bufferIndex(p));
      }
    }
    kernel->paramBuffers.push_back(std::move(indices));
    if (l.cooperative)
      allocateSyncSlots(deviceOrdinal);
  }
  std::lock_guard<std::mutex> lock(mutex);
  auto &slot = loaded[{deviceOrdinal, canonical}];
  if (!slot)
    slot = std::move(kernel);
  fast[{deviceOrdinal, structural}] = slot.get();
  return *slot;
}

void Runtime::allocateSyncSlots(int deviceOrdinal) {
  std::lock_guard<std::mutex> lock(mutex);
  if (syncBase.count(deviceOrdinal))
    return;
  Driver &d = Driver::get();
  size_t bytes = static_cast<size_t>(kSyncSlots) * kSyncSlotBytes;
  CUdeviceptr base = 0;
  d.check(d.cuMemAlloc(&base, bytes), "allocating the grid barriers' words");
  // Synchronous: a kernel is loaded outside stream capture (the first
  // call of an op, as every JIT-compiled kernel's).
  d.check(d.cuMemsetD8(base, 0, bytes), "zeroing the grid barriers' words");
  syncBase[deviceOrdinal] = base;
}

void *Runtime::syncWords(int deviceOrdinal, CUstream stream) {
  std::lock_guard<std::mutex> lock(mutex);
  auto it = syncSlot.find({deviceOrdinal, stream});
  int slot;
  if (it != syncSlot.end()) {
    slot = it->second;
  } else {
    int &used = syncSlotsUsed[deviceOrdinal];
    if (used >= kSyncSlots)
      throw Error("mhc: cooperative launches on more than " +
                  std::to_string(kSyncSlots) + " streams of device " +
                  std::to_string(deviceOrdinal));
    slot = used++;
    syncSlot[{deviceOrdinal, stream}] = slot;
  }
  return reinterpret_cast<void *>(syncBase.at(deviceOrdinal) +
                                  static_cast<CUdeviceptr>(slot) * kSyncSlotBytes);
}

CUresult Runtime::start(const LaunchDesc &l, CUfunction fn, unsigned grid,
                        unsigned shared, CUstream stream, void **params) {
  Driver &d = Driver::get();
  unsigned block = static_cast<unsigned>(l.block);
  if (l.programmatic && d.cuLaunchKernelEx) {
    // Cooperative and programmatic stream serialization in one launch: the
    // grid may start during the previous kernel's tail and waits for it
    // itself (griddepcontrol.wait); inside stream capture this becomes a
    // programmatic edge of the graph.
    CUlaunchAttribute attrs[2] = {};
    unsigned count = 0;
    attrs[count].id = kLaunchAttributeProgrammaticStreamSerialization;
    attrs[count++].value = 1;
    if (l.cooperative) {
      attrs[count].id = kLaunchAttributeCooperative;
      attrs[count++].value = 1;
    }
    CUlaunchConfig config{grid, 1, 1, block, 1, 1, shared, stream, attrs, count};
    return d.cuLaunchKernelEx(&config, fn, params, nullptr);
  }
  return l.cooperative
             ? d.cuLaunchCooperativeKernel(fn, grid, 1, 1, block, 1, 1, shared,
                                           stream, params)
             : d.cuLaunchKernel(fn, grid, 1, 1, block, 1, 1, shared, stream,
                                params, nullptr);
}

void Runtime::launch(const LoadedKernel &kernel, int64_t M, int64_t S,
                     void *const *buffers, size_t count, CUstream stream) {
  const Manifest &m = kernel.manifest;
  if (count != m.buffers.size())
    throw Error("mhc: " + kernel.spec.kernelName() + " takes " +
                std::to_string(m.buffers.size()) + " buffers, got " +
                std::to_string(count));
  if (M <= 0)
    return;
  // Within these the manifest's formulas cannot overflow (Manifest.h).
  if (M > limits::kMaxTokens || S < 1 || S > m.split.largest())
    throw Error("mhc: " + kernel.spec.kernelName() + " cannot launch for M = " +
                std::to_string(M) + ", S = " + std::to_string(S) +
                " (M <= " + std::to_string(limits::kMaxTokens) + ", S = split(M))");
  Driver &d = Driver::get();
  // The module's functions launch only in its context, and this thread may
  // have none current: the autograd engine's device thread, whose first mhc
  // call is a backward op, runs no CUDA runtime call that would make one
  // current if the caching allocator has the outputs' blocks cached.
  d.makeCurrent(kernel.context);
  // Each buffer is a 1-D memref descriptor: (ptr, ptr, 0, size, 1). No heap
  // allocation per call: the arrays' bounds are the manifest's limits, which
  // Manifest::fromJson checked.
  Descriptor descriptors[limits::kMaxBuffers];
  for (size_t i = 0; i < count; ++i)
    descriptors[i] = {buffers[i], buffers[i], 0, m.buffers[i].elems.at(M, S), 1};
  void *params[limits::kMaxPtxParams];
  TensorMap maps[limits::kMaxTensorMaps];
  Descriptor sync{};
  for (size_t li = 0; li < m.launches.size(); ++li) {
    const LaunchDesc &l = m.launches[li];
    size_t np = 0;
    int nMaps = 0;
    for (int index : kernel.paramBuffers[li]) {
      if (index <= kTensorMapBase) {
        const LoadedKernel::TensorMapParam &t = kernel.tensorMaps[kTensorMapBase - index];
        encodeTensorMap(maps[nMaps], t, m.buffers[t.buffer], buffers[t.buffer], M, l.entry);
        params[np++] = &maps[nMaps++];
        continue;
      }
      if (index == -1) {
        params[np++] = const_cast<int64_t *>(&M);
        continue;
      }
      if (index == -2) {
        params[np++] = &S;
        continue;
      }
      if (index == -3) {
        void *words = syncWords(kernel.deviceOrdinal, stream);
        sync = {words, words, 0, kSyncWords, 1};
        params[np++] = &sync.allocated;
        params[np++] = &sync.aligned;
        params[np++] = &sync.offset;
        params[np++] = &sync.size;
        params[np++] = &sync.stride;
        continue;
      }
      Descriptor &desc = descriptors[index];
      params[np++] = &desc.allocated;
      params[np++] = &desc.aligned;
      params[np++] = &desc.offset;
      params[np++] = &desc.size;
      params[np++] = &desc.stride;
    }
    int64_t blocks = l.grid.blocksFor(M, S);
    if (blocks <= 0)
      continue;
    if (blocks > 0x7fffffff)
      throw Error("mhc: " + l.entry + " needs " + std::to_string(blocks) +
                  " blocks, more than a grid holds");
    unsigned grid = static_cast<unsigned>(blocks);
    unsigned shared = static_cast<unsigned>(l.dynamicSharedBytes);
    CUresult r = start(l, kernel.functions[li], grid, shared, stream, params);
    if (r == kCooperativeLaunchTooLarge)
      throw Error("mhc: " + l.entry + " [" + kernel.spec.canonical() +
                  "] is a cooperative launch of " + std::to_string(blocks) +
                  " blocks of " + std::to_string(l.block) +
                  " threads, which cannot all be resident on this device at "
                  "once (fewer SMs than the arch's flagship part?)");
    if (r != 0) // CUDA_SUCCESS; the message is built only on failure
      d.check(r, "launching " + l.entry + " [" + kernel.spec.canonical() +
                     "] for M = " + std::to_string(M));
  }
}

} // namespace mhc::rt
