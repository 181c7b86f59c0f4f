//===- KernelNoAlias.cpp - noalias buffer pointers on lowered kernels -----===//
//
// After GPU-to-NVVM, a kernel's memref arguments are (allocated, aligned,
// offset, size, stride) parameters and their attributes are gone. mhc's
// buffers never overlap, so the aligned pointers get llvm.noalias back.
//
//===----------------------------------------------------------------------===//

#include "mhc/Passes/Passes.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"

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
    if (!module->hasAttr("mhc.manifest"))
      return;
    for (auto func : module.getOps<LLVM::LLVMFuncOp>()) {
      if (!func->hasAttr(NVVM::NVVMDialect::getKernelFuncAttrName()))
        continue;
      auto types = func.getFunctionType().getParams();
      // A memref is two pointers followed by three i64; M and S are i64.
      for (unsigned i = 0; i + 1 < types.size(); ++i) {
        if (!isa<LLVM::LLVMPointerType>(types[i]) ||
            !isa<LLVM::LLVMPointerType>(types[i + 1]))
          continue;
        func.setArgAttr(i + 1, LLVM::LLVMDialect::getNoAliasAttrName(),
                        UnitAttr::get(&getContext()));
        ++i;
      }
    }
  }
};

} // namespace
