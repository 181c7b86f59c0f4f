//===- Composition.cpp - a spec's launches out of other specs' ------------===//

#include "builder/Composition.h"

using namespace mlir;
using namespace mlir::mhc;

void Composition::contract(const std::string &name, ::mhc::DType dtype,
                           ::mhc::BufferRole role, ::mhc::Extent elems) {
  composer.declare({name, dtype, role, elems});
}

LogicalResult
Composition::stage(const ::mhc::KernelSpec &stageSpec,
                   const ::mhc::StageBinding &binding,
                   function_ref<LogicalResult(KernelContext &)> build) {
  ::mhc::Manifest stageManifest;
  KernelContext stageCtx(ctx.b, ctx.module, stageSpec, stageManifest);
  stageCtx.launchPrefix = ctx.launchPrefix + "_" + binding.stage;
  if (failed(build(stageCtx)))
    return ctx.module.emitError()
           << "stage '" << binding.stage << "' (" << stageSpec.canonical()
           << ") of '" << ctx.spec.canonical() << "' failed to build";
  stageCtx.finish();
  // A stage whose own spec lowers LLVM's level keeps it, per launch
  // (pipeline/LowerToPTX.cpp lowers each launch as its own module).
  if (stageCtx.llvmOptLevel != ctx.llvmOptLevel)
    for (const ::mhc::LaunchDesc &launch : stageManifest.launches)
      if (auto func = ctx.module.lookupSymbol<gpu::GPUFuncOp>(launch.entry))
        func->setAttr("mhc.llvm_opt_level",
                      ctx.b.getI32IntegerAttr(stageCtx.llvmOptLevel));
  std::string error;
  if (!composer.addStage(stageManifest, binding, error))
    return ctx.module.emitError()
           << "composing '" << ctx.spec.canonical() << "': " << error;
  return success();
}

LogicalResult Composition::finish() {
  std::string error;
  if (!composer.finish(error))
    return ctx.module.emitError()
           << "composing '" << ctx.spec.canonical() << "': " << error;
  return success();
}
