//===- LayerOps.cpp - mhc.layer and mhc.yield -----------------------------===//

#include "Signature.h"

using namespace mlir;
using namespace mlir::mhc;

LogicalResult LayerOp::verifySignature() {
  int64_t n = getN();
  if (failed(verifyPreStepAttrs(*this)))
    return failure();
  Signature sig(*this, n);
  auto xDims = streamDims(n, getLayout());
  if (failed(sig.operand("pre", "x", getX(), getLayout())) ||
      failed(sig.operand("pre", "phi", getPhi())) ||
      failed(sig.operand("pre", "alpha", getAlpha())) ||
      failed(sig.operand("pre", "beta", getBeta())) ||
      (getWeight() && failed(sig.operand("pre", "weight", getWeight()))) ||
      (getBias() && failed(sig.operand("expand_combine", "bias", getBias()))) ||
      failed(sig.check("result", "x_next", getXNext(), xDims,
                       ElemKind::Activation)) ||
      failed(sig.checkSameElementType("result", "x_next", getXNext(), getX(),
                                      "x")))
    return failure();
  return success();
}

LogicalResult LayerOp::verifyRegions() {
  Block &body = getBody().front();
  // The block maps y = aggregate(x, pre) to f, both [M, C] in x's dtype.
  Signature sig(*this, getN());
  auto yDims = {Dim::tokens(), Dim::channels()};
  if (failed(sig.operand("pre", "x", getX(), getLayout())))
    return failure();
  if (body.getNumArguments() != 1)
    return emitOpError() << "body must take exactly one argument (the block "
                            "input y), got "
                         << body.getNumArguments();
  Value y = body.getArgument(0);
  if (failed(sig.check("body argument", "y", y, yDims,
                       ElemKind::Activation)) ||
      failed(sig.checkSameElementType("body argument", "y", y, getX(), "x")))
    return failure();
  auto yield = dyn_cast<YieldOp>(body.getTerminator());
  if (!yield)
    return emitOpError() << "body must end with mhc.yield";
  Value f = yield.getF();
  if (failed(sig.check("yielded value", "f", f, yDims,
                       ElemKind::Activation)) ||
      failed(sig.checkSameElementType("yielded value", "f", f, getX(), "x")))
    return failure();
  return success();
}

LogicalResult LayerOp::inferReturnTypes(MLIRContext *, std::optional<Location>,
                                        Adaptor adaptor,
                                        SmallVectorImpl<Type> &types) {
  types.push_back(adaptor.getX().getType());
  return success();
}

bool LayerOp::isCompatibleReturnTypes(TypeRange l, TypeRange r) {
  return compatibleTensorTypes(l, r);
}
