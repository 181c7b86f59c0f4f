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

#include "mhc/Codegen/Passes.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mhc/Support/Manifest.h"

namespace mlir::mhc {
#define GEN_PASS_DEF_KERNELNOALIAS
#include "mhc/Codegen/Passes.h.inc"
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
      if (failed(checkParams(func, *launch)))
        return signalPassFailure();
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

  /// The manifest's parameters must be the kernel's arguments, one for one,
  /// with a pointer wherever this pass marks one: else it is not this kernel's.
  static LogicalResult checkParams(LLVM::LLVMFuncOp func,
                                   const ::mhc::LaunchDesc &launch) {
    ArrayRef<Type> args = func.getArgumentTypes();
    uint64_t slots = 0;
    for (const std::string &p : launch.params)
      slots += ::mhc::ptxParamWidth(p);
    if (slots != args.size())
      return func.emitError()
             << "kernel has " << args.size() << " arguments, but its manifest's "
             << launch.params.size() << " parameters take " << slots;
    uint64_t at = 0;
    for (const std::string &p : launch.params) {
      int width = ::mhc::ptxParamWidth(p);
      uint64_t pointer = width == 5 ? at + 1 : at;
      if ((::mhc::tensorMapBuffer(p) || width == 5) &&
          !isa<LLVM::LLVMPointerType>(args[pointer]))
        return func.emitError() << "argument " << pointer << " (manifest "
                                << "parameter '" << p << "') is "
                                << args[pointer] << ", not a pointer";
      at += width;
    }
    return success();
  }
};

} // namespace
