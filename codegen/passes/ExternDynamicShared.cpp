//===- ExternDynamicShared.cpp - dynamic shared memory as .extern ---------===//
//
// GPU-to-NVVM lowers gpu.dynamic_shared_memory to an internal zero-sized
// shared global, which NVPTX demotes to a static one-byte variable; an
// external declaration is what PTX needs for the launch's dynamic bytes.
//
//===----------------------------------------------------------------------===//

#include "mhc/Codegen/Passes.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

namespace mlir::mhc {
#define GEN_PASS_DEF_EXTERNDYNAMICSHARED
#include "mhc/Codegen/Passes.h.inc"
} // namespace mlir::mhc

using namespace mlir;

namespace {

struct ExternDynamicSharedPass
    : mlir::mhc::impl::ExternDynamicSharedBase<ExternDynamicSharedPass> {
  void runOnOperation() override {
    auto shared = static_cast<unsigned>(NVVM::NVVMMemorySpace::Shared);
    for (auto global : getOperation().getOps<LLVM::GlobalOp>()) {
      auto array = dyn_cast<LLVM::LLVMArrayType>(global.getGlobalType());
      if (global.getAddrSpace() != shared || !array || array.getNumElements() != 0)
        continue;
      global.setLinkage(LLVM::Linkage::External);
      global.removeValueAttr();
    }
  }
};

} // namespace
