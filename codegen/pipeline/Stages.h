//===- Stages.h - what the code generator's stages share --------*- C++ -*-===//
//
// One file per backend stage, each behind an entry point of
// mhc/Codegen/Codegen.h (as Triton's make_llir / make_ptx / make_cubin):
//   BuildModule.cpp  spec -> gpu.module of gpu.funcs + manifest (buildKernelModule)
//   LowerToPTX.cpp   gpu.module -> NVVM -> PTX (addNVVMLoweringPasses, lowerToPTX)
//   Ptxas.cpp        PTX -> cubin, ptxas' resource report (assembleCubin)
//   VersionInfo.cpp  what produced a kernel (compilerVersionInfo)
//   CompileSpec.cpp  the stages in order for one spec (compileSpecToBundle)
// This header declares what one stage's file asks of another's.
//
//===----------------------------------------------------------------------===//

#ifndef MHC_CODEGEN_PIPELINE_STAGES_H
#define MHC_CODEGEN_PIPELINE_STAGES_H

#include <string>

namespace mlir::mhc {

/// "mhc <release> (codegen <source digest>), MLIR <version>": the manifest's
/// `compiler` and the start of --version-info (VersionInfo.cpp).
std::string generatorVersion();

/// The toolkit's `ptxas --version`: its major release and full version
/// ("13.0.88"); {0, ""} if unknown. Asked once per toolkit (Ptxas.cpp).
struct PtxasVersion {
  int major = 0;
  std::string full;
};
PtxasVersion ptxasVersion(const std::string &toolkit);

} // namespace mlir::mhc

#endif // MHC_CODEGEN_PIPELINE_STAGES_H
