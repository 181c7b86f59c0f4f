//===- GradOps.cpp - the gradient ops -------------------------------------===//
//
// Verification, type inference and kernel description of the backward ops.
// Each mirrors its forward op: same attributes, the forward's inputs as
// operands, and one gradient result per differentiable input.
//
//===----------------------------------------------------------------------===//

#include "Signature.h"

using namespace mlir;
using namespace mlir::mhc;

//===----------------------------------------------------------------------===//
// ProjectGradOp
//===----------------------------------------------------------------------===//

LogicalResult ProjectGradOp::verifySignature() {
  int64_t n = getN();
  if (failed(checkStreamCount(*this, n)))
    return failure();
  Signature sig(*this, n);
  Dim N = Dim::fixed(numLogits(n), "N");
  auto xDims = streamDims(n, getLayout());
  if (failed(sig.operand("project_backward", "x", getX(), getLayout())) ||
      failed(sig.operand("project_backward", "gh", getGh())) ||
      failed(sig.operand("project_backward", "gms", getGms())) ||
      failed(sig.operand("project_backward", "phi", getPhi())) ||
      (getWeight() &&
       failed(sig.operand("project_backward", "weight", getWeight()))) ||
      failed(checkAcc(sig, getAcc(), getX(), n, getLayout())) ||
      failed(sig.check("result", "gx", getGx(), xDims, ElemKind::Activation)) ||
      failed(sig.checkSameElementType("result", "gx", getGx(), getX(), "x")) ||
      failed(sig.check("result", "gphi", getGphi(), {N, Dim::k()},
                       ElemKind::Param)) ||
      failed(sig.checkSameElementType("result", "gphi", getGphi(), getPhi(),
                                      "phi")))
    return failure();
  if (static_cast<bool>(getWeight()) != static_cast<bool>(getGweight()))
    return emitOpError() << "must have a 'gweight' result exactly when it has "
                            "a 'weight' operand";
  if (getWeight() &&
      (failed(sig.check("result", "gweight", getGweight(), {Dim::k()},
                        ElemKind::Param)) ||
       failed(sig.checkSameElementType("result", "gweight", getGweight(),
                                       getWeight(), "weight"))))
    return failure();
  return success();
}

LogicalResult ProjectGradOp::inferReturnTypes(MLIRContext *,
                                              std::optional<Location>,
                                              Adaptor adaptor,
                                              SmallVectorImpl<Type> &types) {
  int64_t m = inferTokens({adaptor.getGh(), adaptor.getGms(), adaptor.getX()});
  types.push_back(withTokens(adaptor.getX(), m));
  types.push_back(adaptor.getPhi().getType());
  if (adaptor.getWeight())
    types.push_back(adaptor.getWeight().getType());
  return success();
}

bool ProjectGradOp::isCompatibleReturnTypes(TypeRange l, TypeRange r) {
  return compatibleTensorTypes(l, r);
}

void ProjectGradOp::describeKernel(::mhc::KernelSpec &spec) {
  spec.op = ::mhc::OpKind::Project;
  spec.dir = ::mhc::Direction::Backward;
  describeProjectFields(spec, *this);
  spec.acc = static_cast<bool>(getAcc());
}

//===----------------------------------------------------------------------===//
// ScaleGradOp
//===----------------------------------------------------------------------===//

LogicalResult ScaleGradOp::verifySignature() {
  int64_t n = getN();
  if (failed(checkStreamCount(*this, n)) || failed(verifyScaleAttrs(*this)))
    return failure();
  Signature sig(*this, n);
  Dim M = Dim::tokens();
  Dim N = Dim::fixed(numLogits(n), "N"), three = Dim::fixed(3, "3");
  if (failed(sig.operand("scale_backward", "gpre", getGpre())) ||
      failed(sig.operand("scale_backward", "gpost", getGpost())) ||
      failed(sig.operand("scale_backward", "glogits", getGlogits())) ||
      failed(sig.operand("scale_backward", "h", getH())) ||
      failed(sig.operand("scale_backward", "ms", getMs())) ||
      failed(sig.operand("scale_backward", "alpha", getAlpha())) ||
      failed(sig.operand("scale_backward", "beta", getBeta())) ||
      failed(sig.check("result", "gh", getGh(), {M, N}, ElemKind::Mixing)) ||
      failed(sig.check("result", "gms", getGms(), {M}, ElemKind::Mixing)) ||
      failed(sig.check("result", "galpha", getGalpha(), {three},
                       ElemKind::Param)) ||
      failed(sig.checkSameElementType("result", "galpha", getGalpha(),
                                      getAlpha(), "alpha")) ||
      failed(sig.check("result", "gbeta", getGbeta(), {N}, ElemKind::Param)) ||
      failed(sig.checkSameElementType("result", "gbeta", getGbeta(), getBeta(),
                                      "beta")))
    return failure();
  return success();
}

LogicalResult ScaleGradOp::inferReturnTypes(MLIRContext *ctx,
                                            std::optional<Location>,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  int64_t m = inferTokens({adaptor.getGpre(), adaptor.getGpost(),
                           adaptor.getGlogits(), adaptor.getH(),
                           adaptor.getMs()});
  Type f32 = Float32Type::get(ctx);
  types.push_back(tensorOf({m, numLogits(adaptor.getN())}, f32));
  types.push_back(tensorOf({m}, f32));
  types.push_back(adaptor.getAlpha().getType());
  types.push_back(adaptor.getBeta().getType());
  return success();
}

bool ScaleGradOp::isCompatibleReturnTypes(TypeRange l, TypeRange r) {
  return compatibleTensorTypes(l, r);
}

void ScaleGradOp::describeKernel(::mhc::KernelSpec &spec) {
  spec.op = ::mhc::OpKind::Scale;
  spec.dir = ::mhc::Direction::Backward;
  spec.n = getN();
  spec.param = paramDType(getBeta());
  describeScaleFields(spec, *this);
}

//===----------------------------------------------------------------------===//
// SinkhornGradOp
//===----------------------------------------------------------------------===//

LogicalResult SinkhornGradOp::verifySignature() {
  int64_t n = getN();
  if (failed(checkStreamCount(*this, n)) ||
      failed(checkSinkhornAttrs(*this, getMode(), getIters(), getEps())))
    return failure();
  Signature sig(*this, n);
  Dim M = Dim::tokens(), S = Dim::fixed(n, "n");
  if (failed(sig.operand("sinkhorn_backward", "gP", getGP())) ||
      failed(sig.operand("sinkhorn_backward", "logits", getLogits())) ||
      failed(sig.check("result", "glogits", getGlogits(), {M, S, S},
                       ElemKind::Mixing)))
    return failure();
  return success();
}

LogicalResult SinkhornGradOp::inferReturnTypes(MLIRContext *ctx,
                                               std::optional<Location>,
                                               Adaptor adaptor,
                                               SmallVectorImpl<Type> &types) {
  int64_t n = adaptor.getN();
  int64_t m = inferTokens({adaptor.getGP(), adaptor.getLogits()});
  types.push_back(tensorOf({m, n, n}, Float32Type::get(ctx)));
  return success();
}

bool SinkhornGradOp::isCompatibleReturnTypes(TypeRange l, TypeRange r) {
  return compatibleTensorTypes(l, r);
}

void SinkhornGradOp::describeKernel(::mhc::KernelSpec &spec) {
  spec.op = ::mhc::OpKind::Sinkhorn;
  spec.dir = ::mhc::Direction::Backward;
  spec.n = getN();
  describeSinkhornFields(spec, *this);
}

//===----------------------------------------------------------------------===//
// AggregateGradOp
//===----------------------------------------------------------------------===//

LogicalResult AggregateGradOp::verifySignature() {
  int64_t n = getN();
  if (failed(checkStreamCount(*this, n)))
    return failure();
  Signature sig(*this, n);
  Dim M = Dim::tokens(), S = Dim::fixed(n, "n");
  auto xDims = streamDims(n, getLayout());
  if (failed(sig.operand("aggregate_backward", "x", getX(), getLayout())) ||
      failed(sig.operand("aggregate_backward", "gy", getGy())) ||
      failed(sig.checkSameElementType("operand", "gy", getGy(), getX(), "x")) ||
      failed(sig.operand("aggregate_backward", "pre", getPre())) ||
      failed(checkAcc(sig, getAcc(), getX(), n, getLayout())) ||
      failed(sig.check("result", "gx", getGx(), xDims, ElemKind::Activation)) ||
      failed(sig.checkSameElementType("result", "gx", getGx(), getX(), "x")) ||
      failed(sig.check("result", "gpre", getGpre(), {M, S}, ElemKind::Mixing)))
    return failure();
  return success();
}

LogicalResult AggregateGradOp::inferReturnTypes(MLIRContext *ctx,
                                                std::optional<Location>,
                                                Adaptor adaptor,
                                                SmallVectorImpl<Type> &types) {
  int64_t m = inferTokens({adaptor.getGy(), adaptor.getX(), adaptor.getPre()});
  types.push_back(withTokens(adaptor.getX(), m));
  types.push_back(tensorOf({m, static_cast<int64_t>(adaptor.getN())},
                           Float32Type::get(ctx)));
  return success();
}

bool AggregateGradOp::isCompatibleReturnTypes(TypeRange l, TypeRange r) {
  return compatibleTensorTypes(l, r);
}

void AggregateGradOp::describeKernel(::mhc::KernelSpec &spec) {
  spec.op = ::mhc::OpKind::Aggregate;
  spec.dir = ::mhc::Direction::Backward;
  describeStreams(spec, getN(), getLayout(), getX());
  spec.acc = static_cast<bool>(getAcc());
}

//===----------------------------------------------------------------------===//
// ExpandCombineGradOp
//===----------------------------------------------------------------------===//

LogicalResult ExpandCombineGradOp::verifySignature() {
  int64_t n = getN();
  if (failed(checkStreamCount(*this, n)))
    return failure();
  Signature sig(*this, n);
  Dim M = Dim::tokens(), S = Dim::fixed(n, "n"), C = Dim::channels();
  auto xDims = streamDims(n, getLayout());
  if (failed(
          sig.operand("expand_combine_backward", "x", getX(), getLayout())) ||
      failed(sig.operand("expand_combine_backward", "gout", getGout(),
                         getLayout())) ||
      failed(sig.checkSameElementType("operand", "gout", getGout(), getX(),
                                      "x")) ||
      failed(sig.operand("expand_combine_backward", "f", getF())) ||
      failed(sig.checkSameElementType("operand", "f", getF(), getX(), "x")) ||
      failed(sig.operand("expand_combine_backward", "post", getPost())) ||
      failed(sig.operand("expand_combine_backward", "P", getP())) ||
      (getBias() &&
       failed(sig.operand("expand_combine_backward", "bias", getBias()))) ||
      failed(checkAcc(sig, getAcc(), getX(), n, getLayout())) ||
      failed(
          sig.check("result", "gf", getGf(), {M, C}, ElemKind::Activation)) ||
      failed(sig.checkSameElementType("result", "gf", getGf(), getX(), "x")) ||
      failed(
          sig.check("result", "gpost", getGpost(), {M, S}, ElemKind::Mixing)) ||
      failed(sig.check("result", "gx", getGx(), xDims, ElemKind::Activation)) ||
      failed(sig.checkSameElementType("result", "gx", getGx(), getX(), "x")) ||
      failed(sig.check("result", "gP", getGP(), {M, S, S}, ElemKind::Mixing)))
    return failure();
  if (static_cast<bool>(getBias()) != static_cast<bool>(getGbias()))
    return emitOpError() << "must have a 'gbias' result exactly when it has a "
                            "'bias' operand";
  if (getBias() &&
      (failed(sig.check("result", "gbias", getGbias(), {C}, ElemKind::Param)) ||
       failed(sig.checkSameElementType("result", "gbias", getGbias(),
                                       getBias(), "bias"))))
    return failure();
  return success();
}

LogicalResult ExpandCombineGradOp::inferReturnTypes(
    MLIRContext *ctx, std::optional<Location>, Adaptor adaptor,
    SmallVectorImpl<Type> &types) {
  int64_t m = inferTokens({adaptor.getGout(), adaptor.getF(),
                           adaptor.getPost(), adaptor.getX(), adaptor.getP()});
  int64_t n = adaptor.getN();
  Type f32 = Float32Type::get(ctx);
  types.push_back(withTokens(adaptor.getF(), m));
  types.push_back(tensorOf({m, n}, f32));
  types.push_back(withTokens(adaptor.getX(), m));
  types.push_back(tensorOf({m, n, n}, f32));
  if (adaptor.getBias())
    types.push_back(adaptor.getBias().getType());
  return success();
}

bool ExpandCombineGradOp::isCompatibleReturnTypes(TypeRange l, TypeRange r) {
  return compatibleTensorTypes(l, r);
}

void ExpandCombineGradOp::describeKernel(::mhc::KernelSpec &spec) {
  spec.op = ::mhc::OpKind::ExpandCombine;
  spec.dir = ::mhc::Direction::Backward;
  describeStreams(spec, getN(), getLayout(), getX());
  spec.hasBias = static_cast<bool>(getBias());
  if (getBias())
    spec.param = paramDType(getBias());
  spec.acc = static_cast<bool>(getAcc());
}
