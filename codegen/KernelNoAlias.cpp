//===- KernelNoAlias.cpp - noalias buffer pointers on lowered kernels -----===//
//
// After GPU-to-NVVM, a kernel's memref arguments are (allocated, aligned,
// offset, size, stride) parameters and their attributes are gone. mhc's
// buffers never overlap, so the aligned pointers get llvm.noalias back.
// Tensor-map parameters ("tmap:" in the manifest) become 128-byte byval
// grid constants here: GPU-to-NVVM drops argument attributes, and
// nvvm.grid_constant is only valid on an NVVM kernel's arguments.
//
//===----------------------------------------------------------------------===//

#include "mhc/Passes/Passes.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mhc/Support/Manifest.h"

namespace mlir::mhc {
#define GEN_PASS_DEF_KERNELNOALIAS
#include "mhc/Passes/Passes.h.inc"
} // namespace mlir::mhc

using namespace mlir;

namespace {

struct KernelNoAliasPass
    : mlir::mhc::impl::KernelNoAliasBase<KernelNoAliasPass> {
  void runOnOperation() override {
    gpu::GPUModuleOp module = getOperation();
    auto text = module->getAttrOfType<StringAttr>("mhc.manifest");
    if (!text)
      return;
    ::mhc::Manifest manifest;
    std::string error;
    if (!::mhc::Manifest::fromJson(text.str(), manifest, error)) {
      module.emitError() << "invalid mhc.manifest: " << error;
      return signalPassFailure();
    }
    MLIRContext *ctx = &getContext();
    for (auto func : module.getOps<LLVM::LLVMFuncOp>()) {
      if (!func->hasAttr(NVVM::NVVMDialect::getKernelFuncAttrName()))
        continue;
      const ::mhc::LaunchDesc *launch = nullptr;
      for (const ::mhc::LaunchDesc &l : manifest.launches)
        if (l.entry == func.getName())
          launch = &l;
      if (!launch)
        continue;
      // The parameters in the manifest's order: M and S one i64, a tensor
      // map one pointer, a memref five (allocated, aligned, offset, size,
      // stride).
      unsigned at = 0;
      for (const std::string &p : launch->params) {
        if (::mhc::tensorMapBuffer(p)) {
          // 128 bytes by value, read in place by TMA: a grid constant
          // (its address stays in parameter space).
          func.setArgAttr(at, LLVM::LLVMDialect::getByValAttrName(),
                          TypeAttr::get(LLVM::LLVMArrayType::get(IntegerType::get(ctx, 8), 128)));
          func.setArgAttr(at, LLVM::LLVMDialect::getAlignAttrName(),
                          IntegerAttr::get(IntegerType::get(ctx, 64), 64));
          func.setArgAttr(at, NVVM::NVVMDialect::getGridConstantAttrName(),
                          UnitAttr::get(ctx));
        } else if (::mhc::ptxParamWidth(p) == 5) {
          func.setArgAttr(at + 1, LLVM::LLVMDialect::getNoAliasAttrName(), UnitAttr::get(ctx));
        }
        at += ::mhc::ptxParamWidth(p);
      }
    }
  }
};

} // namespace
