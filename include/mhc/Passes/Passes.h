//===- Passes.h - mhc transformation passes ---------------------*- C++ -*-===//

#ifndef MHC_PASSES_PASSES_H
#define MHC_PASSES_PASSES_H

#include "mhc/Dialect/MhcOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
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
#include "mhc/Passes/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "mhc/Passes/Passes.h.inc"

/// Names of the discardable attributes mhc-specialize attaches.
inline constexpr llvm::StringLiteral kSpecAttrName = "mhc.spec";
inline constexpr llvm::StringLiteral kFallbackAttrName = "mhc.fallback";

} // namespace mlir::mhc

#endif // MHC_PASSES_PASSES_H
