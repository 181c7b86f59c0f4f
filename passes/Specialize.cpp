//===- Specialize.cpp - stamp kernel specs, mark unsupported ops ----------===//

#include "FusionRules.h"
#include "mhc/Passes/Passes.h"

#include "mlir/IR/Builders.h"

namespace mlir::mhc {
#define GEN_PASS_DEF_SPECIALIZE
#include "mhc/Passes/Passes.h.inc"
} // namespace mlir::mhc

using namespace mlir;
using namespace mlir::mhc;

namespace {

/// The token count of a pre or post_pre forward (its results' dimension 0):
/// static, dynamic, or failure where they disagree.
FailureOr<int64_t> tokensOf(Operation *op) {
  return commonTokens(op->getResultTypes());
}

/// `spec` as the one-launch kernel, when it serves it (the x_next slice
/// fits; ::mhc::unsupportedReason asks the same).
std::optional<::mhc::KernelSpec> oneLaunchSpec(const ::mhc::KernelSpec &spec) {
  if (!spec.acceptsCooperative())
    return std::nullopt;
  ::mhc::KernelSpec coop = spec;
  coop.cooperative = true;
  if (!::mhc::unsupportedReason(coop).empty())
    return std::nullopt;
  return coop;
}

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
      // The forward of pre and post_pre at M <= kOneLaunchMaxTokens: the
      // one-launch kernel (the torch ops' rule). A dynamic M keeps the
      // multi-launch spec and names the one-launch one beside it.
      op->removeAttr(kOneLaunchSpecAttrName);
      if (std::optional<::mhc::KernelSpec> coop = oneLaunchSpec(spec)) {
        FailureOr<int64_t> tokens = tokensOf(op);
        if (succeeded(tokens) && ShapedType::isDynamic(*tokens))
          op->setAttr(kOneLaunchSpecAttrName,
                      KernelSpecAttr::get(&getContext(), coop->canonical()));
        else if (succeeded(tokens) && ::mhc::forwardRunsInOneLaunch(*tokens))
          spec = *coop;
      }
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
