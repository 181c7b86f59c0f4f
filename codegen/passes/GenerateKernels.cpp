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
  current.cooperative = stamped.cooperative; // (the token count's choice)
  if (current.canonical() == stamped.canonical())
    return success();
  return op->emitError() << "stale mhc.spec \"" << stamped.canonical()
                         << "\": the op now needs \"" << current.canonical()
                         << "\" (run mhc-specialize after rewriting the IR)";
}

/// The gpu.module of the spec in `op`'s attribute `attrName` (built once
/// per distinct spec); its symbol name, or failure (reported at the op).
FailureOr<std::string> generate(ModuleOp top, SymbolTable &symbols,
                                KernelOpInterface op, StringRef attrName) {
  auto specAttr = op->getAttrOfType<KernelSpecAttr>(attrName);
  std::string error;
  auto spec = ::mhc::KernelSpec::parse(specAttr.getKey(), &error);
  if (!spec) {
    op->emitError() << "invalid " << attrName << ": " << error;
    return failure();
  }
  // Any rewrite after mhc-specialize, ours or upstream, can change the op
  // under its spec, so codegen rebuilds the spec here rather than trust it.
  if (failed(checkSpecDescribes(op, *spec)))
    return failure();
  std::string name = spec->kernelName();
  Operation *existing = symbols.lookup(name);
  if (existing && !isa<gpu::GPUModuleOp>(existing)) {
    existing->emitError() << "symbol @" << name << " is not a kernel "
                          << "module but names the kernel of "
                          << spec->canonical();
    return failure();
  }
  if (!existing) {
    ::mhc::Manifest manifest;
    FailureOr<gpu::GPUModuleOp> module = buildKernelModule(top, *spec, manifest);
    if (failed(module)) {
      op->emitError() << "kernel generation failed for " << spec->canonical();
      return failure();
    }
    symbols.insert(*module);
  }
  return name;
}

struct GenerateKernelsPass
    : mlir::mhc::impl::GenerateKernelsBase<GenerateKernelsPass> {
  void runOnOperation() override {
    ModuleOp top = getOperation();
    SymbolTable symbols(top);
    WalkResult result = top.walk([&](KernelOpInterface op) {
      if (!op->getAttrOfType<KernelSpecAttr>(kSpecAttrName) ||
          op->hasAttr(kFallbackAttrName))
        return WalkResult::advance();
      FailureOr<std::string> name = generate(top, symbols, op, kSpecAttrName);
      if (failed(name))
        return WalkResult::interrupt();
      op->setAttr("mhc.kernel", FlatSymbolRefAttr::get(&getContext(), *name));
      // A dynamic M's one-launch kernel, which the runtime takes at small M.
      if (op->getAttrOfType<KernelSpecAttr>(kOneLaunchSpecAttrName)) {
        FailureOr<std::string> coop =
            generate(top, symbols, op, kOneLaunchSpecAttrName);
        if (failed(coop))
          return WalkResult::interrupt();
        op->setAttr("mhc.kernel_one_launch",
                    FlatSymbolRefAttr::get(&getContext(), *coop));
      }
      return WalkResult::advance();
    });
    if (result.wasInterrupted())
      signalPassFailure();
  }
};

} // namespace
