//===- Passes.h - mhc transformation passes ---------------------*- C++ -*-===//
//
// The mhc -> mhc graph passes of mhc/Passes/Passes.td (the code generation
// passes are in mhc/Codegen/Passes.h).
//
//===----------------------------------------------------------------------===//

#ifndef MHC_PASSES_PASSES_H
#define MHC_PASSES_PASSES_H

#include "mhc/Dialect/MhcOps.h"
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
/// On a pre / post_pre forward whose token count is dynamic: the one-launch
/// spec (coop=1) the runtime takes at M <= kOneLaunchMaxTokens, beside
/// mhc.spec (the multi-launch one, for every other M), so that the kernels
/// built and bundled cover every M (docs/design/serve.md).
inline constexpr llvm::StringLiteral kOneLaunchSpecAttrName = "mhc.spec_one_launch";

} // namespace mlir::mhc

#endif // MHC_PASSES_PASSES_H
