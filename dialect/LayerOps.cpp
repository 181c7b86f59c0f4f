//===- LayerOps.cpp - mhc.layer and mhc.yield -----------------------------===//

#include "Signature.h"

using namespace mlir;
using namespace mlir::mhc;

LogicalResult LayerOp::verifySignature() {
  int64_t n = getN();
  if (failed(verifyPreStepAttrs(*this)))
    return failure();
  Signature sig(*this, n);
  Dim N = Dim::fixed(numLogits(n), "N");
  auto xDims = streamDims(n, getLayout());
  if (failed(sig.check("operand", "x", getX(), xDims, ElemKind::Activation)) ||
      failed(sig.check("operand", "phi", getPhi(), {N, Dim::k()},
                       ElemKind::Param)) ||
      failed(sig.check("operand", "alpha", getAlpha(), {Dim::fixed(3, "3")},
                       ElemKind::Param)) ||
      failed(sig.check("operand", "beta", getBeta(), {N}, ElemKind::Param)) ||
      (getWeight() && failed(sig.check("operand", "weight", getWeight(),
                                       {Dim::k()}, ElemKind::Param))) ||
      (getBias() && failed(sig.check("operand", "bias", getBias(),
                                     {Dim::channels()}, ElemKind::Param))) ||
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
  if (failed(sig.check("operand", "x", getX(), streamDims(getN(), getLayout()),
                       ElemKind::Activation)))
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
