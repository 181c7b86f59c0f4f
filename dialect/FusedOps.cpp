//===- FusedOps.cpp - mhc.pre ---------------------------------------------===//
//
// Verification, type inference and kernel description of the fused forward
// ops. mhc.pre's rules are the union of project's, scale's, sinkhorn's and
// aggregate's, plus one parameter dtype (the kernel spec has one `param`).
//
//===----------------------------------------------------------------------===//

#include "Signature.h"

using namespace mlir;
using namespace mlir::mhc;

//===----------------------------------------------------------------------===//
// PreOp
//===----------------------------------------------------------------------===//

LogicalResult PreOp::verifySignature() {
  int64_t n = getN();
  if (failed(verifyPreStepAttrs(*this)))
    return failure();
  Signature sig(*this, n);
  Dim N = Dim::fixed(numLogits(n), "N"), S = Dim::fixed(n, "n");
  Dim M = Dim::tokens();
  Value phi = getPhi();
  if (failed(sig.operand("pre", "x", getX(), getLayout())) ||
      failed(sig.operand("pre", "phi", phi)) ||
      failed(sig.operand("pre", "alpha", getAlpha())) ||
      failed(sig.checkSameElementType("operand", "alpha", getAlpha(), phi,
                                      "phi")) ||
      failed(sig.operand("pre", "beta", getBeta())) ||
      failed(
          sig.checkSameElementType("operand", "beta", getBeta(), phi, "phi")) ||
      (getWeight() && (failed(sig.operand("pre", "weight", getWeight())) ||
                       failed(sig.checkSameElementType(
                           "operand", "weight", getWeight(), phi, "phi")))) ||
      failed(sig.check("result", "h", getH(), {M, N}, ElemKind::Mixing)) ||
      failed(sig.check("result", "ms", getMs(), {M}, ElemKind::Mixing)) ||
      failed(sig.check("result", "pre", getPre(), {M, S}, ElemKind::Mixing)) ||
      failed(
          sig.check("result", "post", getPost(), {M, S}, ElemKind::Mixing)) ||
      failed(sig.check("result", "logits", getLogits(), {M, S, S},
                       ElemKind::Mixing)) ||
      failed(sig.check("result", "P", getP(), {M, S, S}, ElemKind::Mixing)) ||
      failed(sig.check("result", "y", getY(), {M, Dim::channels()},
                       ElemKind::Activation)) ||
      failed(sig.checkSameElementType("result", "y", getY(), getX(), "x")))
    return failure();
  return success();
}

LogicalResult PreOp::inferReturnTypes(MLIRContext *ctx,
                                      std::optional<Location>, Adaptor adaptor,
                                      SmallVectorImpl<Type> &types) {
  Value x = adaptor.getX();
  appendPreStepTypes(types, x, adaptor.getLayout(), inferTokens(x),
                     adaptor.getN());
  return success();
}

bool PreOp::isCompatibleReturnTypes(TypeRange l, TypeRange r) {
  return compatibleTensorTypes(l, r);
}

void PreOp::describeKernel(::mhc::KernelSpec &spec) {
  spec.op = ::mhc::OpKind::Pre;
  spec.dir = ::mhc::Direction::Forward;
  // Its parts' fields; the verifier made alpha, beta and weight phi's
  // element type, so project's param (phi's) is scale's too.
  describeProjectFields(spec, *this);
  describeScaleFields(spec, *this);
  describeSinkhornFields(spec, *this);
}
