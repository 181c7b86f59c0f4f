//===- CudaDriver.h - the CUDA driver API, loaded at run time ---*- C++ -*-===//
//
// libcuda is dlopen'ed on first use, so the runtime (and the PyTorch
// extension) load on machines without a GPU; only launching needs one.
//
//===----------------------------------------------------------------------===//

#ifndef MHC_RUNTIME_CUDADRIVER_H
#define MHC_RUNTIME_CUDADRIVER_H

#include <stdexcept>
#include <string>

namespace mhc::rt {

/// Every runtime failure: driver errors, compile failures, bad cache files.
class Error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

using CUresult = int;
using CUdevice = int;
using CUcontext = struct CUctx_st *;
using CUmodule = struct CUmod_st *;
using CUfunction = struct CUfunc_st *;
using CUstream = struct CUstream_st *;
using CUdeviceptr = unsigned long long;

/// cuda.h's CUlaunchAttribute (an id, padding to 8 bytes, a 64-byte value
/// union of which the runtime sets one int) and CUlaunchConfig.
struct CUlaunchAttribute {
  int id;
  char pad[4];
  union {
    char bytes[64];
    int value;
  };
};
struct CUlaunchConfig {
  unsigned gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ;
  unsigned sharedMemBytes;
  CUstream hStream;
  CUlaunchAttribute *attrs;
  unsigned numAttrs;
};
static_assert(sizeof(CUlaunchAttribute) == 72 && sizeof(CUlaunchConfig) == 56,
              "cuda.h's layouts");
/// CUlaunchAttributeID values of cuda.h.
inline constexpr int kLaunchAttributeCooperative = 2;
inline constexpr int kLaunchAttributeProgrammaticStreamSerialization = 6;

class Driver {
public:
  /// The process-wide driver; throws Error when libcuda cannot be loaded.
  static Driver &get();

  /// Throws Error("<what>: <driver message>") unless result is success.
  void check(CUresult result, const std::string &what) const;
  /// The device of ordinal `deviceOrdinal` (needs no context).
  CUdevice device(int deviceOrdinal);
  /// The device's primary context (PyTorch's and the CUDA runtime's), retained:
  /// callers keep it for the process (Runtime caches one per device).
  CUcontext primaryContext(CUdevice device);
  /// Makes `ctx` current on the calling thread unless it already is. A CUDA
  /// context is per thread: a thread that never made one current (the
  /// autograd engine's device threads, a new Python thread) has none, and
  /// the CUDA runtime makes one current only in its own calls.
  void makeCurrent(CUcontext ctx);
  /// The codegen target for `device`: sm_80 for 8.x, sm_90a, sm_100a, or
  /// the plain sm_XY (which codegen does not support) for anything else.
  std::string archOf(CUdevice device);

  CUresult (*cuInit)(unsigned) = nullptr;
  CUresult (*cuCtxGetCurrent)(CUcontext *) = nullptr;
  CUresult (*cuCtxSetCurrent)(CUcontext) = nullptr;
  CUresult (*cuDeviceGet)(CUdevice *, int) = nullptr;
  CUresult (*cuDeviceGetAttribute)(int *, int, CUdevice) = nullptr;
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice) = nullptr;
  CUresult (*cuModuleLoadData)(CUmodule *, const void *) = nullptr;
  CUresult (*cuModuleGetFunction)(CUfunction *, CUmodule, const char *) = nullptr;
  CUresult (*cuFuncSetAttribute)(CUfunction, int, int) = nullptr;
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned,
                             unsigned, unsigned, unsigned, unsigned, CUstream,
                             void **, void **) = nullptr;
  CUresult (*cuGetErrorString)(CUresult, const char **) = nullptr;
  /// A launch whose grid must be co-resident (grid barriers); fails with
  /// CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE when it cannot be.
  CUresult (*cuLaunchCooperativeKernel)(CUfunction, unsigned, unsigned,
                                        unsigned, unsigned, unsigned, unsigned,
                                        unsigned, CUstream, void **) = nullptr;
  /// A launch with attributes (cooperative, programmatic stream
  /// serialization); null when the driver lacks it (CUDA < 12.0): then
  /// programmatic launches fall back to the plain or cooperative launch.
  CUresult (*cuLaunchKernelEx)(const CUlaunchConfig *, CUfunction, void **,
                               void **) = nullptr;
  /// The grid barriers' words (Runtime::syncWords): allocated and zeroed
  /// once per device.
  CUresult (*cuMemAlloc)(CUdeviceptr *, size_t) = nullptr;
  CUresult (*cuMemsetD8)(CUdeviceptr, unsigned char, size_t) = nullptr;
  /// cuTensorMapEncodeTiled (CUDA 12+), the enums passed as their values;
  /// null when the driver lacks it (then kernels with tensor maps fail to
  /// launch with that message).
  CUresult (*cuTensorMapEncodeTiled)(void *, int, unsigned, void *,
                                     const unsigned long long *,
                                     const unsigned long long *,
                                     const unsigned *, const unsigned *, int,
                                     int, int, int) = nullptr;

private:
  Driver();
};

} // namespace mhc::rt

#endif // MHC_RUNTIME_CUDADRIVER_H
