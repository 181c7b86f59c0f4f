//===- GenerateKernels.cpp - specialised mhc ops -> gpu.module kernels -----===//

#include "mhc/Codegen/Codegen.h"
#include "mhc/Passes/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/SymbolTable.h"

namespace mlir::mhc {
#define GEN_PASS_DEF_GENERATEKERNELS
#include "mhc/Passes/Passes.h.inc"
} // namespace mlir::mhc

using namespace mlir;
using namespace mlir::mhc;

namespace {

struct GenerateKernelsPass
    : mlir::mhc::impl::GenerateKernelsBase<GenerateKernelsPass> {
  void runOnOperation() override {
    ModuleOp top = getOperation();
    SymbolTable symbols(top);
    WalkResult result = top.walk([&](KernelOpInterface op) {
      auto specAttr = op->getAttrOfType<KernelSpecAttr>(kSpecAttrName);
      if (!specAttr || op->hasAttr(kFallbackAttrName))
        return WalkResult::advance();
      std::string error;
      auto spec = ::mhc::KernelSpec::parse(specAttr.getKey(), &error);
      if (!spec) {
        op->emitError() << "invalid mhc.spec: " << error;
        return WalkResult::interrupt();
      }
      std::string name = spec->kernelName();
      if (!symbols.lookup(name)) {
        ::mhc::Manifest manifest;
        FailureOr<gpu::GPUModuleOp> module =
            buildKernelModule(top, *spec, manifest);
        if (failed(module)) {
          op->emitError() << "kernel generation failed for " << spec->canonical();
          return WalkResult::interrupt();
        }
        symbols.insert(*module);
      }
      op->setAttr("mhc.kernel", FlatSymbolRefAttr::get(&getContext(), name));
      return WalkResult::advance();
    });
    if (result.wasInterrupted())
      signalPassFailure();
  }
};

} // namespace
