//===- mhc-opt.cpp - the mhc optimizer driver -----------------------------===//
//
// mlir-opt with the mhc dialect, its passes, the upstream dialects mhc graphs
// are written with (func, arith, tensor) and those its kernels are generated
// in (gpu, scf, vector, math, memref, nvgpu, nvvm, llvm), plus the named
// pipeline --mhc-lower-to-nvvm that takes generated kernels to NVVM. Its
// --help starts with mhc's passes and leaves out LLVM's backend flags.
//
//===----------------------------------------------------------------------===//

#include "mhc/Codegen/Codegen.h"
#include "mhc/Codegen/Passes.h"
#include "mhc/Dialect/MhcOps.h"
#include "mhc/Passes/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/Transforms/Passes.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <set>
#include <string>

namespace cl = llvm::cl;

/// The options registered before MLIR's: LLVM's backend flags, which mhc
/// users do not need. Hidden from --help (still in --help-hidden).
static void hideStaticLLVMOptions(const std::set<cl::Option *> &options) {
  for (cl::Option *option : options) {
    bool generic = llvm::any_of(option->Categories, [](cl::OptionCategory *c) {
      return c->getName() == "Generic Options";
    });
    if (!generic && option->getOptionHiddenFlag() == cl::NotHidden)
      option->setHiddenFlag(cl::Hidden);
  }
}

static std::set<cl::Option *> registeredOptions() {
  std::set<cl::Option *> options;
  for (auto &entry : cl::getRegisteredOptions())
    options.insert(entry.second);
  return options;
}

/// The top of --help: mhc's passes and pipelines with their summaries (from
/// the pass registry), before MlirOptMain's header.
static std::string mhcHelpHeader(llvm::StringRef mlirHeader) {
  // Each registered pass and pipeline is a literal option of MLIR's pass
  // list, so mhc's are the registered option names starting with "mhc-".
  std::set<std::string> names; // sorted
  for (auto &entry : cl::getRegisteredOptions())
    if (entry.first.starts_with("mhc-"))
      names.insert(entry.first.str());
  std::string header;
  llvm::raw_string_ostream os(header);
  os << "mhc optimizer driver: the mhc dialect and its passes\n\n"
     << "mhc passes and pipelines (their options are in the pass list "
        "below):\n";
  for (const std::string &name : names) {
    const mlir::PassRegistryEntry *entry = mlir::PassInfo::lookup(name);
    if (!entry)
      entry = mlir::PassPipelineInfo::lookup(name);
    if (entry)
      os << "  --" << llvm::left_justify(name, 28)
         << entry->getPassDescription() << "\n";
  }
  os << "\nA model's kernels: --mhc-expand-layers --canonicalize --cse "
        "--mhc-fuse-pre --mhc-specialize=arch=sm_90a --mhc-generate-kernels "
        "--mhc-write-bundle=dir=<dir>\n"
     << mlirHeader;
  return header;
}

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  registry.insert<mlir::mhc::MhcDialect, mlir::arith::ArithDialect,
                  mlir::func::FuncDialect, mlir::tensor::TensorDialect>();
  mlir::mhc::registerCodegenDialects(registry);
  mlir::registerTransformsPasses();
  mlir::registerGpuModuleToBinaryPass();
  mlir::mhc::registerMhcPasses();
  mlir::mhc::registerMhcCodegenPasses();
  mlir::PassPipelineRegistration<>(
      "mhc-lower-to-nvvm",
      "lower the kernels of every gpu.module to NVVM (LLVM dialect)",
      [](mlir::OpPassManager &pm) { mlir::mhc::addNVVMLoweringPasses(pm); });

  std::set<cl::Option *> llvmOptions = registeredOptions();
  // "\nAvailable Dialects: ..." (MLIR's header after an empty tool name).
  std::string mlirHeader = mlir::registerCLIOptions("", registry);
  hideStaticLLVMOptions(llvmOptions);
  auto [input, output] =
      mlir::parseCLIOptions(argc, argv, mhcHelpHeader(mlirHeader));
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, input, output, registry));
}
