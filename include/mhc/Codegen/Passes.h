//===- Passes.h - mhc code generation passes --------------------*- C++ -*-===//
//
// The passes of mhc/Codegen/Passes.td: mhc-generate-kernels,
// mhc-kernel-noalias, mhc-extern-dynamic-shared and mhc-write-bundle, with
// their create functions and registerMhcCodegenPasses().
//
//===----------------------------------------------------------------------===//

#ifndef MHC_CODEGEN_PASSES_H
#define MHC_CODEGEN_PASSES_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace mlir::mhc {

#define GEN_PASS_DECL
#include "mhc/Codegen/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "mhc/Codegen/Passes.h.inc"

} // namespace mlir::mhc

#endif // MHC_CODEGEN_PASSES_H
