//===- FusionRules.cpp - rules shared by the fusion passes ----------------===//

#include "FusionRules.h"

#include "mhc/Support/OpContract.h"

#include <string>

using namespace mlir;

FailureOr<int64_t> mlir::mhc::commonTokens(TypeRange types) {
  int64_t m = ShapedType::kDynamic;
  for (Type t : types) {
    int64_t d = cast<RankedTensorType>(t).getDimSize(0);
    if (ShapedType::isDynamic(d))
      continue;
    if (!ShapedType::isDynamic(m) && m != d)
      return failure();
    m = d;
  }
  return m;
}

std::string mlir::mhc::preStepSlowReason(int64_t n, int64_t tokens) {
  bool dynamic = ShapedType::isDynamic(tokens);
  if (::mhc::preStepFuses(n, dynamic ? -1 : tokens))
    return "";
  std::string reason = dynamic ? std::string("the token count is dynamic")
                               : "M = " + std::to_string(tokens);
  return reason + " and n = " + std::to_string(n) + " > " +
         std::to_string(::mhc::kFusedPreMaxStreamsAnyM) +
         ", where the fused kernel is slower than the four ops above " +
         std::to_string(::mhc::kFusedPreMaxTokens) + " tokens";
}
