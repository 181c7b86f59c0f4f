//===- FusionRules.h - rules shared by the fusion passes --------*- C++ -*-===//
//
// What mhc-fuse-pre and mhc-fuse-layers both decide: the token count one
// fused op's values agree on, and whether a pre step runs fused at it.
//
//===----------------------------------------------------------------------===//

#ifndef MHC_PASSES_FUSIONRULES_H
#define MHC_PASSES_FUSIONRULES_H

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/TypeRange.h"

#include <string>

namespace mlir::mhc {

/// The static token count (dimension 0) shared by `types`, or dynamic;
/// failure when two disagree (each op verified on its own, but one fused op
/// must agree with itself).
FailureOr<int64_t> commonTokens(TypeRange types);

/// Why a pre step of n streams would not run fused at `tokens` (dynamic:
/// unknown), by ::mhc::preStepFuses (the rule torch.ops.mhc.pre follows at
/// run time); empty when it would.
std::string preStepSlowReason(int64_t n, int64_t tokens);

} // namespace mlir::mhc

#endif // MHC_PASSES_FUSIONRULES_H
