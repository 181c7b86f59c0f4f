//===- SeamOps.cpp - mhc.post_pre and mhc.post_pre_grad -------------------===//
//
// Verification, type inference and kernel description of the layer seam
// (docs/design/seam.md, "The contract, operand by operand"). The rules are
// those of expand_combine for layer l's operands and of mhc.pre for layer
// l+1's, plus one parameter dtype for bias, phi, alpha, beta and weight (the
// kernel spec has one `param`).
//
//===----------------------------------------------------------------------===//

#include "Signature.h"

using namespace mlir;
using namespace mlir::mhc;

namespace {

/// Layer l's operands of a seam op, by the rules of `contract` (the torch op
/// whose arguments they are): x first (it fixes M and C), then f, post, P
/// and the optional bias.
template <typename OpT>
LogicalResult verifyPostOperands(Signature &sig, OpT op, StringRef contract) {
  Value x = op.getX();
  if (failed(sig.operand(contract, "x", x, op.getLayout())) ||
      failed(sig.operand(contract, "f", op.getF())) ||
      failed(sig.checkSameElementType("operand", "f", op.getF(), x, "x")) ||
      failed(sig.operand(contract, "post", op.getPost())) ||
      failed(sig.operand(contract, "P", op.getP())) ||
      (op.getBias() && failed(sig.operand(contract, "bias", op.getBias()))))
    return failure();
  return success();
}

/// Layer l+1's parameters phi, alpha, beta and the optional weight (mhc.pre's
/// rules), and the one parameter dtype, phi's, that they and bias share.
template <typename OpT> LogicalResult verifyNextParams(Signature &sig, OpT op) {
  Value phi = op.getPhi();
  auto sameAsPhi = [&](StringRef name, Value v) {
    return !v ||
           succeeded(sig.checkSameElementType("operand", name, v, phi, "phi"));
  };
  if (failed(sig.operand("pre", "phi", phi)) ||
      failed(sig.operand("pre", "alpha", op.getAlpha())) ||
      !sameAsPhi("alpha", op.getAlpha()) ||
      failed(sig.operand("pre", "beta", op.getBeta())) ||
      !sameAsPhi("beta", op.getBeta()) ||
      (op.getWeight() &&
       failed(sig.operand("pre", "weight", op.getWeight()))) ||
      !sameAsPhi("weight", op.getWeight()) || !sameAsPhi("bias", op.getBias()))
    return failure();
  return success();
}

/// A streams-shaped value (x_next, gx_next, gx) with x's element type.
LogicalResult checkStreams(Signature &sig, StringRef role, StringRef name,
                           Value v, Value x, int64_t n, Layout layout) {
  if (failed(sig.check(role, name, v, streamDims(n, layout),
                       ElemKind::Activation)) ||
      failed(sig.checkSameElementType(role, name, v, x, "x")))
    return failure();
  return success();
}

/// A result that exists exactly when its parameter does, with its type.
LogicalResult checkParamGrad(Signature &sig, Operation *op, StringRef name,
                             Value grad, StringRef paramName, Value param,
                             ArrayRef<Dim> dims) {
  if (static_cast<bool>(param) != static_cast<bool>(grad))
    return op->emitOpError()
           << "must have a '" << name << "' result exactly when it has a '"
           << paramName << "' operand";
  if (param &&
      (failed(sig.check("result", name, grad, dims, ElemKind::Param)) ||
       failed(
           sig.checkSameElementType("result", name, grad, param, paramName))))
    return failure();
  return success();
}

/// Fields of both seam specs: expand_combine's bias and the pre step's
/// project, scale and sinkhorn fields. The verifier made every parameter
/// phi's element type, so the spec's one `param` is phi's.
template <typename OpT>
void describeSeamFields(::mhc::KernelSpec &spec, OpT op) {
  spec.op = ::mhc::OpKind::PostPre;
  describeProjectFields(spec, op);
  describeScaleFields(spec, op);
  describeSinkhornFields(spec, op);
  spec.hasBias = static_cast<bool>(op.getBias());
}

} // namespace

//===----------------------------------------------------------------------===//
// PostPreOp
//===----------------------------------------------------------------------===//

LogicalResult PostPreOp::verifySignature() {
  int64_t n = getN();
  if (failed(verifyPreStepAttrs(*this)))
    return failure();
  Signature sig(*this, n);
  Dim N = Dim::fixed(numLogits(n), "N"), S = Dim::fixed(n, "n");
  Dim M = Dim::tokens();
  if (failed(verifyPostOperands(sig, *this, "expand_combine")) ||
      failed(verifyNextParams(sig, *this)) ||
      failed(checkStreams(sig, "result", "x_next", getXNext(), getX(), n,
                          getLayout())) ||
      failed(sig.check("result", "h", getH(), {M, N}, ElemKind::Mixing)) ||
      failed(sig.check("result", "ms", getMs(), {M}, ElemKind::Mixing)) ||
      failed(sig.check("result", "pre", getPre(), {M, S}, ElemKind::Mixing)) ||
      failed(sig.check("result", "post_next", getPostNext(), {M, S},
                       ElemKind::Mixing)) ||
      failed(sig.check("result", "logits", getLogits(), {M, S, S},
                       ElemKind::Mixing)) ||
      failed(sig.check("result", "P_next", getPNext(), {M, S, S},
                       ElemKind::Mixing)) ||
      failed(sig.check("result", "y", getY(), {M, Dim::channels()},
                       ElemKind::Activation)) ||
      failed(sig.checkSameElementType("result", "y", getY(), getX(), "x")))
    return failure();
  return success();
}

LogicalResult PostPreOp::inferReturnTypes(MLIRContext *ctx,
                                          std::optional<Location>,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &types) {
  Value x = adaptor.getX();
  int64_t m =
      inferTokens({adaptor.getF(), adaptor.getPost(), x, adaptor.getP()});
  types.push_back(withTokens(x, m)); // x_next, then the next layer's pre step
  appendPreStepTypes(types, x, adaptor.getLayout(), m, adaptor.getN());
  return success();
}

bool PostPreOp::isCompatibleReturnTypes(TypeRange l, TypeRange r) {
  return compatibleTensorTypes(l, r);
}

void PostPreOp::describeKernel(::mhc::KernelSpec &spec) {
  describeSeamFields(spec, *this);
  spec.dir = ::mhc::Direction::Forward;
}

//===----------------------------------------------------------------------===//
// PostPreGradOp
//===----------------------------------------------------------------------===//

namespace {

/// The operands after layer l's: the incoming gradients, the saved forward
/// values of layer l+1 and its parameters.
LogicalResult verifyGradInputs(Signature &sig, PostPreGradOp op) {
  int64_t n = op.getN();
  Value x = op.getX();
  Layout layout = op.getLayout();
  Dim M = Dim::tokens(), S = Dim::fixed(n, "n");
  if (failed(checkStreams(sig, "operand", "gx_next", op.getGxNext(), x, n,
                          layout)) ||
      failed(sig.operand("aggregate_backward", "gy", op.getGy())) ||
      failed(sig.checkSameElementType("operand", "gy", op.getGy(), x, "x")) ||
      failed(sig.check("operand", "gpost_next", op.getGpostNext(), {M, S},
                       ElemKind::Mixing)) ||
      failed(sig.check("operand", "gP_next", op.getGPNext(), {M, S, S},
                       ElemKind::Mixing)) ||
      failed(checkStreams(sig, "operand", "x_next", op.getXNext(), x, n,
                          layout)) ||
      failed(sig.operand("scale_backward", "h", op.getH())) ||
      failed(sig.operand("scale_backward", "ms", op.getMs())) ||
      failed(sig.operand("aggregate_backward", "pre", op.getPre())) ||
      failed(sig.operand("sinkhorn_backward", "logits", op.getLogits())) ||
      failed(verifyNextParams(sig, op)))
    return failure();
  return success();
}

/// Every result has its input's type; gbias and gweight exist exactly when
/// bias and weight do.
LogicalResult verifyGradResults(Signature &sig, PostPreGradOp op) {
  int64_t n = op.getN();
  Value x = op.getX();
  Dim M = Dim::tokens(), S = Dim::fixed(n, "n"), C = Dim::channels();
  Dim N = Dim::fixed(numLogits(n), "N");
  if (failed(checkStreams(sig, "result", "gx", op.getGx(), x, n,
                          op.getLayout())) ||
      failed(sig.check("result", "gf", op.getGf(), {M, C},
                       ElemKind::Activation)) ||
      failed(sig.checkSameElementType("result", "gf", op.getGf(), x, "x")) ||
      failed(sig.check("result", "gpost", op.getGpost(), {M, S},
                       ElemKind::Mixing)) ||
      failed(
          sig.check("result", "gP", op.getGP(), {M, S, S}, ElemKind::Mixing)) ||
      failed(checkParamGrad(sig, op, "gbias", op.getGbias(), "bias",
                            op.getBias(), {C})) ||
      failed(checkParamGrad(sig, op, "gphi", op.getGphi(), "phi", op.getPhi(),
                            {N, Dim::k()})) ||
      failed(checkParamGrad(sig, op, "galpha", op.getGalpha(), "alpha",
                            op.getAlpha(), {Dim::fixed(3, "3")})) ||
      failed(checkParamGrad(sig, op, "gbeta", op.getGbeta(), "beta",
                            op.getBeta(), {N})) ||
      failed(checkParamGrad(sig, op, "gweight", op.getGweight(), "weight",
                            op.getWeight(), {Dim::k()})))
    return failure();
  return success();
}

} // namespace

LogicalResult PostPreGradOp::verifySignature() {
  if (failed(verifyPreStepAttrs(*this)))
    return failure();
  Signature sig(*this, getN());
  if (failed(verifyPostOperands(sig, *this, "expand_combine_backward")) ||
      failed(verifyGradInputs(sig, *this)) ||
      failed(verifyGradResults(sig, *this)))
    return failure();
  return success();
}

LogicalResult PostPreGradOp::inferReturnTypes(MLIRContext *ctx,
                                              std::optional<Location>,
                                              Adaptor adaptor,
                                              SmallVectorImpl<Type> &types) {
  int64_t m =
      inferTokens({adaptor.getGxNext(), adaptor.getGy(), adaptor.getGpostNext(),
                   adaptor.getGPNext(), adaptor.getF(), adaptor.getPost(),
                   adaptor.getX(), adaptor.getP()});
  int64_t n = adaptor.getN();
  Type f32 = Float32Type::get(ctx);
  types.push_back(withTokens(adaptor.getX(), m)); // gx
  types.push_back(withTokens(adaptor.getF(), m)); // gf
  types.push_back(tensorOf({m, n}, f32));         // gpost
  types.push_back(tensorOf({m, n, n}, f32));      // gP
  if (adaptor.getBias())
    types.push_back(adaptor.getBias().getType()); // gbias
  types.push_back(adaptor.getPhi().getType());
  types.push_back(adaptor.getAlpha().getType());
  types.push_back(adaptor.getBeta().getType());
  if (adaptor.getWeight())
    types.push_back(adaptor.getWeight().getType()); // gweight
  return success();
}

bool PostPreGradOp::isCompatibleReturnTypes(TypeRange l, TypeRange r) {
  return compatibleTensorTypes(l, r);
}

void PostPreGradOp::describeKernel(::mhc::KernelSpec &spec) {
  describeSeamFields(spec, *this);
  spec.dir = ::mhc::Direction::Backward;
}
