//===- MlirFuzzer.cpp - libFuzzer target: parse, verify, run mhc's passes -===//
//
// One input is one MLIR module written with the mhc dialect (and func, arith,
// tensor, as mhc graphs are). It is parsed and verified, printed and parsed
// again, then run through the pass pipelines users run, one pass at a time.
// Diagnostics are expected and swallowed (MHC_FUZZ_VERBOSE=1 prints them);
// what counts is a sanitizer report or a broken invariant: a printed module
// that does not parse back to the same text, or a pass that succeeds and
// leaves IR that does not verify.
//
//===----------------------------------------------------------------------===//

#include "mhc/Dialect/MhcOps.h"
#include "mhc/Passes/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <cstdlib>
#include <string>

using namespace mlir;

namespace {

/// The pipelines of the lit tests and scripts/example.sh, without codegen
/// (too slow per input), as one pass pipeline element per step.
const std::vector<std::vector<const char *>> kPipelines = {
    {"canonicalize", "cse"},
    {"mhc-expand-layers", "canonicalize", "cse", "mhc-fuse-pre",
     "mhc-fuse-layers", "mhc-specialize{arch=sm_90a}", "mhc-report-kernels"},
    {"mhc-fuse-layers", "canonicalize", "cse"},
    {"mhc-fuse-pre", "mhc-specialize{arch=sm_100a}", "canonicalize",
     "mhc-report-kernels"},
    {"mhc-specialize{arch=sm_80}", "mhc-expand-layers", "cse"},
};

bool verbose() {
  static const bool on = std::getenv("MHC_FUZZ_VERBOSE") != nullptr;
  return on;
}

[[noreturn]] void fail(const char *what, const std::string &detail) {
  llvm::errs() << "mhc-fuzz-mlir: " << what << "\n" << detail << "\n";
  std::abort();
}

std::string print(Operation *op) {
  std::string text;
  llvm::raw_string_ostream os(text);
  op->print(os);
  return text;
}

/// Runs `step` on `module`; a pass that succeeds must leave valid IR.
bool runStep(MLIRContext &ctx, ModuleOp module, const char *step) {
  PassManager pm(&ctx);
  pm.enableVerifier(false);
  std::string error;
  llvm::raw_string_ostream errorStream(error);
  if (failed(parsePassPipeline(std::string("builtin.module(") + step + ")", pm,
                               errorStream)))
    fail("bad pipeline element", step);
  if (failed(pm.run(module)))
    return false;
  if (failed(verify(module)))
    fail("a pass succeeded and left IR that does not verify", step);
  return true;
}

} // namespace

// LLVM's BumpPtrAllocator poisons and unpoisons its slabs only where it is
// compiled with ASan: here mhc's code inlines one copy and the installed MLIR
// libraries another, so a slab poisoned by one is used by the other. Ignore
// the allocators' manual poisoning (real overflows are still found).
extern "C" const char *__asan_default_options() {
  return "allow_user_poisoning=0";
}

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  registerCanonicalizerPass();
  registerCSEPass();
  mlir::mhc::registerExpandLayers();
  mlir::mhc::registerFusePre();
  mlir::mhc::registerFuseLayers();
  mlir::mhc::registerSpecialize();
  mlir::mhc::registerReportKernels();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  DialectRegistry registry;
  registry.insert<mlir::mhc::MhcDialect, arith::ArithDialect, func::FuncDialect,
                  tensor::TensorDialect>();
  MLIRContext ctx(registry, MLIRContext::Threading::DISABLED);
  ScopedDiagnosticHandler swallow(&ctx, [](Diagnostic &diag) {
    if (verbose())
      llvm::errs() << diag.getLocation() << ": " << diag << "\n";
    return success();
  });

  // MLIR's lexer reads up to a terminating NUL: the input needs a copy.
  std::string source(reinterpret_cast<const char *>(data), size);
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(source, &ctx);
  if (!module)
    return 0;

  // The custom assembly formats must round-trip.
  std::string printed = print(*module);
  OwningOpRef<ModuleOp> reparsed = parseSourceString<ModuleOp>(printed, &ctx);
  if (!reparsed)
    fail("the printed module does not parse", printed);
  if (print(*reparsed) != printed)
    fail("printing the reparsed module gives other text", printed);

  for (const std::vector<const char *> &pipeline : kPipelines) {
    OwningOpRef<ModuleOp> copy = module->clone();
    for (const char *step : pipeline)
      if (!runStep(ctx, *copy, step))
        break;
  }
  return 0;
}
