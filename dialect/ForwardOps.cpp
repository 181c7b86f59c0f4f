//===- ForwardOps.cpp - project, scale, sinkhorn, aggregate, expand_combine ===//
//
// Verification, type inference and kernel description of the forward ops.
//
//===----------------------------------------------------------------------===//

#include "Signature.h"

using namespace mlir;
using namespace mlir::mhc;

//===----------------------------------------------------------------------===//
// ProjectOp
//===----------------------------------------------------------------------===//

LogicalResult ProjectOp::verifySignature() {
  int64_t n = getN();
  if (failed(checkStreamCount(*this, n)))
    return failure();
  Signature sig(*this, n);
  Dim N = Dim::fixed(numLogits(n), "N");
  if (failed(sig.operand("project", "x", getX(), getLayout())) ||
      failed(sig.operand("project", "phi", getPhi())) ||
      (getWeight() && failed(sig.operand("project", "weight", getWeight()))) ||
      failed(sig.check("result", "h", getH(), {Dim::tokens(), N},
                       ElemKind::Mixing)) ||
      failed(sig.check("result", "ms", getMs(), {Dim::tokens()},
                       ElemKind::Mixing)))
    return failure();
  return success();
}

LogicalResult ProjectOp::inferReturnTypes(MLIRContext *ctx,
                                          std::optional<Location>,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &types) {
  int64_t m = inferTokens(adaptor.getX());
  Type f32 = Float32Type::get(ctx);
  types.push_back(tensorOf({m, numLogits(adaptor.getN())}, f32));
  types.push_back(tensorOf({m}, f32));
  return success();
}

bool ProjectOp::isCompatibleReturnTypes(TypeRange l, TypeRange r) {
  return compatibleTensorTypes(l, r);
}

void ProjectOp::describeKernel(::mhc::KernelSpec &spec) {
  spec.op = ::mhc::OpKind::Project;
  spec.dir = ::mhc::Direction::Forward;
  describeProjectFields(spec, *this);
}

//===----------------------------------------------------------------------===//
// ScaleOp
//===----------------------------------------------------------------------===//

LogicalResult ScaleOp::verifySignature() {
  int64_t n = getN();
  if (failed(checkStreamCount(*this, n)) || failed(verifyScaleAttrs(*this)))
    return failure();
  Signature sig(*this, n);
  Dim S = Dim::fixed(n, "n");
  Dim M = Dim::tokens();
  if (failed(sig.operand("scale", "h", getH())) ||
      failed(sig.operand("scale", "ms", getMs())) ||
      failed(sig.operand("scale", "alpha", getAlpha())) ||
      failed(sig.operand("scale", "beta", getBeta())) ||
      failed(sig.check("result", "pre", getPre(), {M, S}, ElemKind::Mixing)) ||
      failed(
          sig.check("result", "post", getPost(), {M, S}, ElemKind::Mixing)) ||
      failed(sig.check("result", "logits", getLogits(), {M, S, S},
                       ElemKind::Mixing)))
    return failure();
  return success();
}

LogicalResult ScaleOp::inferReturnTypes(MLIRContext *ctx,
                                        std::optional<Location>,
                                        Adaptor adaptor,
                                        SmallVectorImpl<Type> &types) {
  int64_t m = inferTokens({adaptor.getH(), adaptor.getMs()});
  int64_t n = adaptor.getN();
  Type f32 = Float32Type::get(ctx);
  types.push_back(tensorOf({m, n}, f32));
  types.push_back(tensorOf({m, n}, f32));
  types.push_back(tensorOf({m, n, n}, f32));
  return success();
}

bool ScaleOp::isCompatibleReturnTypes(TypeRange l, TypeRange r) {
  return compatibleTensorTypes(l, r);
}

void ScaleOp::describeKernel(::mhc::KernelSpec &spec) {
  spec.op = ::mhc::OpKind::Scale;
  spec.dir = ::mhc::Direction::Forward;
  spec.n = getN();
  spec.param = paramDType(getBeta());
  describeScaleFields(spec, *this);
}

//===----------------------------------------------------------------------===//
// SinkhornOp
//===----------------------------------------------------------------------===//

LogicalResult SinkhornOp::verifySignature() {
  int64_t n = getN();
  if (failed(checkStreamCount(*this, n)) ||
      failed(checkSinkhornAttrs(*this, getMode(), getIters(), getEps())))
    return failure();
  Signature sig(*this, n);
  Dim S = Dim::fixed(n, "n");
  if (failed(sig.operand("sinkhorn", "logits", getLogits())) ||
      failed(sig.check("result", "P", getP(), {Dim::tokens(), S, S},
                       ElemKind::Mixing)))
    return failure();
  return success();
}

LogicalResult SinkhornOp::inferReturnTypes(MLIRContext *ctx,
                                           std::optional<Location>,
                                           Adaptor adaptor,
                                           SmallVectorImpl<Type> &types) {
  int64_t n = adaptor.getN();
  types.push_back(tensorOf({inferTokens(adaptor.getLogits()), n, n},
                           Float32Type::get(ctx)));
  return success();
}

bool SinkhornOp::isCompatibleReturnTypes(TypeRange l, TypeRange r) {
  return compatibleTensorTypes(l, r);
}

void SinkhornOp::describeKernel(::mhc::KernelSpec &spec) {
  spec.op = ::mhc::OpKind::Sinkhorn;
  spec.dir = ::mhc::Direction::Forward;
  spec.n = getN();
  describeSinkhornFields(spec, *this);
}

//===----------------------------------------------------------------------===//
// AggregateOp
//===----------------------------------------------------------------------===//

LogicalResult AggregateOp::verifySignature() {
  int64_t n = getN();
  if (failed(checkStreamCount(*this, n)))
    return failure();
  Signature sig(*this, n);
  Dim M = Dim::tokens();
  if (failed(sig.operand("aggregate", "x", getX(), getLayout())) ||
      failed(sig.operand("aggregate", "pre", getPre())) ||
      failed(sig.check("result", "y", getY(), {M, Dim::channels()},
                       ElemKind::Activation)) ||
      failed(sig.checkSameElementType("result", "y", getY(), getX(), "x")))
    return failure();
  return success();
}

LogicalResult AggregateOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location>,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  Value x = adaptor.getX();
  types.push_back(tensorOf({inferTokens({x, adaptor.getPre()}),
                            channelsOf(x, adaptor.getLayout())},
                           elementTypeOf(x)));
  return success();
}

bool AggregateOp::isCompatibleReturnTypes(TypeRange l, TypeRange r) {
  return compatibleTensorTypes(l, r);
}

void AggregateOp::describeKernel(::mhc::KernelSpec &spec) {
  spec.op = ::mhc::OpKind::Aggregate;
  spec.dir = ::mhc::Direction::Forward;
  describeStreams(spec, getN(), getLayout(), getX());
}

//===----------------------------------------------------------------------===//
// ExpandCombineOp
//===----------------------------------------------------------------------===//

LogicalResult ExpandCombineOp::verifySignature() {
  int64_t n = getN();
  if (failed(checkStreamCount(*this, n)))
    return failure();
  Signature sig(*this, n);
  auto xDims = streamDims(n, getLayout());
  if (failed(sig.operand("expand_combine", "x", getX(), getLayout())) ||
      failed(sig.operand("expand_combine", "f", getF())) ||
      failed(sig.checkSameElementType("operand", "f", getF(), getX(), "x")) ||
      failed(sig.operand("expand_combine", "post", getPost())) ||
      failed(sig.operand("expand_combine", "P", getP())) ||
      (getBias() && failed(sig.operand("expand_combine", "bias", getBias()))) ||
      failed(
          sig.check("result", "out", getOut(), xDims, ElemKind::Activation)) ||
      failed(sig.checkSameElementType("result", "out", getOut(), getX(), "x")))
    return failure();
  return success();
}

LogicalResult ExpandCombineOp::inferReturnTypes(MLIRContext *,
                                                std::optional<Location>,
                                                Adaptor adaptor,
                                                SmallVectorImpl<Type> &types) {
  int64_t m = inferTokens({adaptor.getF(), adaptor.getPost(), adaptor.getX(),
                           adaptor.getP()});
  types.push_back(withTokens(adaptor.getX(), m));
  return success();
}

bool ExpandCombineOp::isCompatibleReturnTypes(TypeRange l, TypeRange r) {
  return compatibleTensorTypes(l, r);
}

void ExpandCombineOp::describeKernel(::mhc::KernelSpec &spec) {
  spec.op = ::mhc::OpKind::ExpandCombine;
  spec.dir = ::mhc::Direction::Forward;
  describeStreams(spec, getN(), getLayout(), getX());
  spec.hasBias = static_cast<bool>(getBias());
  if (getBias())
    spec.param = paramDType(getBias());
}
