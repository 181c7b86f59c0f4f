//===- Runtime.cpp - load and launch compiled mhc kernels -----------------===//

#include "mhc/Runtime/Runtime.h"

#include <cstdio>

namespace mhc::rt {

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
  std::string arch = d.archOf(d.currentDevice(deviceOrdinal));
  arches[deviceOrdinal] = arch;
  return arch;
}

const LoadedKernel &Runtime::kernel(const KernelSpec &spec, int deviceOrdinal) {
  uint64_t structural = spec.structuralHash();
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto hit = fast.find({deviceOrdinal, structural});
    if (hit != fast.end())
      return *hit->second;
  }
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
  d.currentDevice(deviceOrdinal);
  auto kernel = std::make_unique<LoadedKernel>();
  kernel->spec = spec;
  kernel->manifest = compiled.manifest;
  CUmodule module = nullptr;
  d.check(d.cuModuleLoadData(&module, compiled.cubin.data()),
          "loading kernel " + spec.kernelName() + " [" + canonical + "]");
  for (const LaunchDesc &l : kernel->manifest.launches) {
    CUfunction fn = nullptr;
    d.check(d.cuModuleGetFunction(&fn, module, l.entry.c_str()),
            "finding " + l.entry + " [" + canonical + "]");
    kernel->functions.push_back(fn);
    std::vector<int> indices;
    for (const std::string &p : l.params)
      indices.push_back(p == "M" ? -1 : p == "S" ? -2 : kernel->bufferIndex(p));
    kernel->paramBuffers.push_back(std::move(indices));
  }
  std::lock_guard<std::mutex> lock(mutex);
  auto &slot = loaded[{deviceOrdinal, canonical}];
  if (!slot)
    slot = std::move(kernel);
  fast[{deviceOrdinal, structural}] = slot.get();
  return *slot;
}

void Runtime::launch(const LoadedKernel &kernel, int64_t M,
                     const std::vector<void *> &buffers, CUstream stream) {
  const Manifest &m = kernel.manifest;
  if (buffers.size() != m.buffers.size())
    throw Error("mhc: " + kernel.spec.kernelName() + " takes " +
                std::to_string(m.buffers.size()) + " buffers, got " +
                std::to_string(buffers.size()));
  if (M <= 0)
    return;
  int64_t S = m.split.splitFor(M);
  Driver &d = Driver::get();
  // Each buffer is a 1-D memref descriptor: (ptr, ptr, 0, size, 1).
  struct Descriptor {
    void *allocated, *aligned;
    int64_t offset, size, stride;
  };
  std::vector<Descriptor> descriptors(buffers.size());
  for (size_t i = 0; i < buffers.size(); ++i)
    descriptors[i] = {buffers[i], buffers[i], 0, m.buffers[i].elems.at(M, S), 1};
  for (size_t li = 0; li < m.launches.size(); ++li) {
    const LaunchDesc &l = m.launches[li];
    std::vector<void *> params;
    params.reserve(l.params.size() * 5);
    for (int index : kernel.paramBuffers[li]) {
      if (index == -1) {
        params.push_back(const_cast<int64_t *>(&M));
        continue;
      }
      if (index == -2) {
        params.push_back(&S);
        continue;
      }
      Descriptor &desc = descriptors[index];
      params.push_back(&desc.allocated);
      params.push_back(&desc.aligned);
      params.push_back(&desc.offset);
      params.push_back(&desc.size);
      params.push_back(&desc.stride);
    }
    int64_t blocks = l.grid.blocksFor(M, S);
    if (blocks <= 0)
      continue;
    if (blocks > 0x7fffffff)
      throw Error("mhc: " + l.entry + " needs " + std::to_string(blocks) +
                  " blocks, more than a grid holds");
    d.check(d.cuLaunchKernel(kernel.functions[li], static_cast<unsigned>(blocks),
                             1, 1, static_cast<unsigned>(l.block), 1, 1,
                             static_cast<unsigned>(l.dynamicSharedBytes),
                             stream, params.data(), nullptr),
            "launching " + l.entry + " [" + kernel.spec.canonical() + "] for M = " +
                std::to_string(M));
  }
}

} // namespace mhc::rt
