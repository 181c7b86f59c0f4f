//===- CudaDriver.cpp - the CUDA driver API, loaded at run time -----------===//

#include "mhc/Runtime/CudaDriver.h"

#include <dlfcn.h>

namespace mhc::rt {

namespace {
constexpr int kComputeCapabilityMajor = 75;
constexpr int kComputeCapabilityMinor = 76;

template <typename F> void bind(void *lib, F &fn, const char *name) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  if (!fn)
    throw Error(std::string("mhc: libcuda lacks ") + name);
}
} // namespace

Driver &Driver::get() {
  static Driver driver; // a failed construction throws again next time
  return driver;
}

Driver::Driver() {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib)
    lib = dlopen("libcuda.so", RTLD_NOW | RTLD_LOCAL);
  if (!lib)
    throw Error("mhc: cannot load the CUDA driver (libcuda.so.1): no GPU "
                "driver on this machine");
  bind(lib, cuInit, "cuInit");
  bind(lib, cuCtxGetCurrent, "cuCtxGetCurrent");
  bind(lib, cuCtxSetCurrent, "cuCtxSetCurrent");
  bind(lib, cuDeviceGet, "cuDeviceGet");
  bind(lib, cuDeviceGetAttribute, "cuDeviceGetAttribute");
  bind(lib, cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  bind(lib, cuModuleLoadData, "cuModuleLoadData");
  bind(lib, cuModuleGetFunction, "cuModuleGetFunction");
  bind(lib, cuFuncSetAttribute, "cuFuncSetAttribute");
  bind(lib, cuLaunchKernel, "cuLaunchKernel");
  bind(lib, cuGetErrorString, "cuGetErrorString");
  bind(lib, cuLaunchCooperativeKernel, "cuLaunchCooperativeKernel");
  bind(lib, cuMemAlloc, "cuMemAlloc_v2");
  bind(lib, cuMemsetD8, "cuMemsetD8_v2");
  cuLaunchKernelEx = reinterpret_cast<decltype(cuLaunchKernelEx)>(
      dlsym(lib, "cuLaunchKernelEx"));
  cuTensorMapEncodeTiled = reinterpret_cast<decltype(cuTensorMapEncodeTiled)>(
      dlsym(lib, "cuTensorMapEncodeTiled"));
  check(cuInit(0), "cuInit");
}

void Driver::check(CUresult result, const std::string &what) const {
  if (result == 0)
    return;
  const char *message = nullptr;
  if (cuGetErrorString)
    cuGetErrorString(result, &message);
  throw Error(what + ": CUDA driver error " + std::to_string(result) + " (" +
              (message ? message : "unknown") + ")");
}

CUdevice Driver::device(int deviceOrdinal) {
  CUdevice device = 0;
  check(cuDeviceGet(&device, deviceOrdinal), "cuDeviceGet");
  return device;
}

CUcontext Driver::primaryContext(CUdevice device) {
  CUcontext ctx = nullptr;
  check(cuDevicePrimaryCtxRetain(&ctx, device), "cuDevicePrimaryCtxRetain");
  return ctx;
}

void Driver::makeCurrent(CUcontext ctx) {
  CUcontext current = nullptr;
  check(cuCtxGetCurrent(&current), "cuCtxGetCurrent");
  if (current != ctx)
    check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
}

std::string Driver::archOf(CUdevice device) {
  int major = 0, minor = 0;
  check(cuDeviceGetAttribute(&major, kComputeCapabilityMajor, device),
        "cuDeviceGetAttribute");
  check(cuDeviceGetAttribute(&minor, kComputeCapabilityMinor, device),
        "cuDeviceGetAttribute");
  // The codegen target whose cubins run here: sm_80 code runs on every 8.x
  // part; Hopper and Blackwell use their architecture-specific targets.
  if (major == 8)
    return "sm_80";
  if ((major == 9 || major == 10) && minor == 0)
    return "sm_" + std::to_string(major) + "0a";
  return "sm_" + std::to_string(major) + std::to_string(minor);
}

} // namespace mhc::rt
