//===- VersionInfo.cpp - what produced a kernel ---------------------------===//
//
// The generator's version (the release, the digest of every source that
// decides the emitted kernels, MLIR's version) goes into each manifest and,
// with ptxas', into --version-info: the JIT's cache key.
//
//===----------------------------------------------------------------------===//

#include "pipeline/Stages.h"

#include "mhc/Codegen/Codegen.h"
#include "mhc/Codegen/SourceHash.h"

#include "llvm/Config/llvm-config.h"

using namespace mlir;

static const char *kMhcVersion = "0.1.0";

std::string mlir::mhc::generatorVersion() {
  return std::string("mhc ") + kMhcVersion + " (codegen " +
         MHC_CODEGEN_SOURCE_HASH + "), MLIR " + LLVM_VERSION_STRING;
}

std::string mlir::mhc::compilerVersionInfo(const std::string &toolkit) {
  std::string version = ptxasVersion(toolkit).full;
  return generatorVersion() + ", ptxas " + (version.empty() ? "unknown" : version);
}
