//===- Codegen.h - mhc kernels to gpu.func, PTX and cubin --------*- C++ -*-===//

#ifndef MHC_CODEGEN_CODEGEN_H
#define MHC_CODEGEN_CODEGEN_H

#include "mhc/Support/KernelSpec.h"
#include "mhc/Support/Manifest.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/BuiltinOps.h"

#include <string>

namespace mlir {
class DialectRegistry;
class OpPassManager;
namespace mhc {

/// Registers every dialect, interface and translation codegen and
/// serialisation need (gpu, nvvm, llvm, scf, vector, ...).
void registerCodegenDialects(DialectRegistry &registry);

/// Appends to `top` a gpu.module named spec.kernelName() with an
/// #nvvm.target for spec.arch holding every launch of the op, and describes
/// them in `manifest` (all but ptxas resources). Fails, with a diagnostic at
/// `top`'s location, if the spec is unsupported.
FailureOr<gpu::GPUModuleOp> buildKernelModule(ModuleOp top,
                                              const ::mhc::KernelSpec &spec,
                                              ::mhc::Manifest &manifest);

/// Adds the passes from gpu.func kernels to NVVM (LLVM dialect) inside every
/// gpu.module of a builtin.module.
void addNVVMLoweringPasses(OpPassManager &pm);

/// Lowers every gpu.module of `top` to NVVM and serialises each to PTX (as
/// gpu-module-to-binary, format=isa, would). A module's kernels are lowered
/// as one module each, on parallel threads, and their PTX joined
/// (mergePTXModules). `toolkit` is the CUDA toolkit path (libdevice);
/// returns the PTX per gpu.module name.
FailureOr<std::map<std::string, std::string>>
lowerToPTX(ModuleOp top, const std::string &toolkit);

/// The CUDA toolkit to use: $MHC_CUDA_HOME, $CUDA_HOME, else /usr/local/cuda.
std::string defaultToolkitPath();

/// How long one ptxas run may take before it is killed and reported. The
/// largest kernel assembles in about a second; the limit stays below the
/// JIT's default budget for a whole mhc-compile (MHC_COMPILE_TIMEOUT, 300 s)
/// so that a hung ptxas is reported by the compiler, with its output and the
/// spec, rather than only timed out by the JIT.
inline constexpr unsigned kPtxasTimeoutSeconds = 120;

/// Runs ptxas on `ptx` for `arch`, writing `cubinPath`; fills each launch's
/// resources from ptxas' -v report and the manifest's `ptxas` version. On
/// failure (it could not start, exited non-zero, crashed or ran past
/// `timeoutSeconds`) returns false with `log` saying which, with the
/// command line, then ptxas' output (stdout and stderr).
bool assembleCubin(const std::string &toolkit, const std::string &ptx,
                   const std::string &arch, const std::string &cubinPath,
                   ::mhc::Manifest &manifest, std::string &log,
                   unsigned timeoutSeconds = kPtxasTimeoutSeconds);

/// Compiles one spec to `dir`/<name>.{ptx,cubin,json}, name defaulting to
/// the kernel name. With `cubin` false only PTX and the manifest are written.
LogicalResult compileSpecToBundle(MLIRContext *ctx,
                                  const ::mhc::KernelSpec &spec,
                                  const std::string &dir, bool cubin,
                                  std::string &error,
                                  const std::string &name = "");

/// "mhc <version>, MLIR <version>, ptxas <version>" for `toolkit`: what the
/// runtime's cache key records about the compiler.
std::string compilerVersionInfo(const std::string &toolkit);

} // namespace mhc
} // namespace mlir

#endif // MHC_CODEGEN_CODEGEN_H
