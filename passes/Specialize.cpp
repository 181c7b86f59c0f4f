//===- Specialize.cpp - stamp kernel specs, mark unsupported ops ----------===//

#include "mhc/Passes/Passes.h"

#include "mlir/IR/Builders.h"

namespace mlir::mhc {
#define GEN_PASS_DEF_SPECIALIZE
#include "mhc/Passes/Passes.h.inc"
} // namespace mlir::mhc

using namespace mlir;
using namespace mlir::mhc;

namespace {

struct SpecializePass : mlir::mhc::impl::SpecializeBase<SpecializePass> {
  using SpecializeBase::SpecializeBase;

  // An unknown arch is a usage error of the pass, reported when the pipeline
  // is parsed, not a property of any op.
  LogicalResult initializeOptions(
      StringRef options,
      function_ref<LogicalResult(const Twine &)> errorHandler) override {
    if (failed(Pass::initializeOptions(options, errorHandler)))
      return failure();
    if (!::mhc::isSupportedArch(arch))
      return errorHandler("mhc-specialize: unknown arch '" + arch +
                          "'; expected sm_80, sm_90a or sm_100a");
    return success();
  }

  void runOnOperation() override {
    Builder builder(&getContext());
    bool specialised = false;
    WalkResult result = getOperation()->walk([&](Operation *op) {
      if (isa<LayerOp>(op)) {
        op->emitError() << "mhc-specialize needs mhc.layer expanded first "
                           "(run mhc-expand-layers)";
        return WalkResult::interrupt();
      }
      auto kernel = dyn_cast<KernelOpInterface>(op);
      if (!kernel)
        return WalkResult::advance();
      ::mhc::KernelSpec spec;
      kernel.describeKernel(spec);
      spec.arch = arch;
      op->setAttr(kSpecAttrName,
                  KernelSpecAttr::get(&getContext(), spec.canonical()));
      std::string reason = ::mhc::unsupportedReason(spec);
      if (reason.empty())
        op->removeAttr(kFallbackAttrName);
      else
        op->setAttr(kFallbackAttrName, builder.getStringAttr(reason));
      specialised = true;
      return WalkResult::advance();
    });
    if (result.wasInterrupted())
      return signalPassFailure();
    // At the location only (not the op), so the module is not printed.
    if (specialised && !arch.hasValue())
      emitRemark(getOperation()->getLoc())
          << "mhc-specialize: no arch given, specialised for " << arch
          << " (choose one with --mhc-specialize=arch=...)";
  }
};

} // namespace
