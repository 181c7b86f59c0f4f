//===- GenerateKernels.cpp - specialised mhc ops -> gpu.module kernels -----===//

#include "mhc/Codegen/Codegen.h"
#include "mhc/Codegen/Passes.h"
#include "mhc/Passes/Passes.h" // kSpecAttrName, kFallbackAttrName

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
#include "mhc/Codegen/Passes.h.inc"
} // namespace mlir::mhc

using namespace mlir;
using namespace mlir::mhc;

namespace {

/// Fails, at the op, unless `stamped` is the spec the op describes now.
LogicalResult checkSpecDescribes(KernelOpInterface op,
                                 const ::mhc::KernelSpec &stamped) {
  ::mhc::KernelSpec current;
  op.describeKernel(current);
  current.arch = stamped.arch;
  if (current.canonical() == stamped.canonical())
    return success();
  return op->emitError() << "stale mhc.spec \"" << stamped.canonical()
                         << "\": the op now needs \"" << current.canonical()
                         << "\" (run mhc-specialize after rewriting the IR)";
}

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
      // Any rewrite after mhc-specialize, ours or upstream, can change the op
      // under its spec, so codegen rebuilds the spec here rather than trust it.
      if (failed(checkSpecDescribes(op, *spec)))
        return WalkResult::interrupt();
      std::string name = spec->kernelName();
      Operation *existing = symbols.lookup(name);
      if (existing && !isa<gpu::GPUModuleOp>(existing)) {
        existing->emitError() << "symbol @" << name << " is not a kernel "
                              << "module but names the kernel of "
                              << spec->canonical();
        return WalkResult::interrupt();
      }
      if (!existing) {
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
