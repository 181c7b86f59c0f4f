//===- KernelContext.cpp - one kernel spec being built --------------------===//

#include "builder/KernelContext.h"

#include <numeric>

using namespace mlir;
using namespace mlir::mhc;

int64_t KernelContext::actWidth() const {
  return std::gcd(C(), static_cast<int64_t>(16 / ::mhc::byteWidth(spec.act)));
}

int64_t KernelContext::streamWidth() const {
  int64_t perAccess = 16 / ::mhc::byteWidth(spec.act);
  if (spec.layout != ::mhc::Layout::CN || perAccess % n() != 0)
    return actWidth();
  return std::gcd(C(), perAccess / n());
}

int64_t KernelContext::persistentBlocks() const {
  // Two blocks per SM of the arch's flagship part (A100: 108, H100: 132,
  // B200: 148). A compile-time constant, never the device's count, so the
  // reduction order is the same wherever the kernel runs.
  return 2 * ::mhc::flagshipSMs(spec.arch);
}

void KernelContext::buffer(const std::string &name, ::mhc::DType dtype,
                           ::mhc::BufferRole role, ::mhc::Extent elems) {
  manifest.buffers.push_back({name, dtype, role, elems});
}

LaunchBuilder &KernelContext::launch(const std::string &suffix) {
  launches.emplace_back(launchPrefix + "_" + suffix, manifest);
  return launches.back();
}

KernelBuilder KernelContext::begin(LaunchBuilder &launch) {
  gpu::GPUFuncOp func = launch.create(b, module);
  return KernelBuilder(b, func.getLoc());
}

void KernelContext::finish() {
  for (const LaunchBuilder &l : launches)
    manifest.launches.push_back(l.describe());
}
