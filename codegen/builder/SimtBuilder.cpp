//===- SimtBuilder.cpp - constants, arithmetic, math, conversions ---------===//
//
// SimtBuilder's scalar and vector values; its memory accesses are in
// SimtMemory.cpp, its loops and branches in SimtControl.cpp, its threads,
// barriers and inline PTX in SimtThreads.cpp.
//
//===----------------------------------------------------------------------===//

#include "builder/SimtBuilder.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;
using namespace mlir::mhc;

static bool isFloatLike(Value v) {
  return isa<FloatType>(getElementTypeOrSelf(v.getType()));
}

Value SimtBuilder::idx(int64_t v) {
  return arith::ConstantIndexOp::create(b, loc, v);
}
Value SimtBuilder::i32(int64_t v) {
  return arith::ConstantIntOp::create(b, loc, b.getI32Type(), v);
}
Value SimtBuilder::f32(double v) {
  return arith::ConstantOp::create(b, loc, b.getF32FloatAttr(v));
}
Value SimtBuilder::f64(double v) {
  return arith::ConstantOp::create(b, loc, b.getF64FloatAttr(v));
}
Value SimtBuilder::constLike(Value like, double v) {
  return like.getType().isF64() ? f64(v) : f32(v);
}
Value SimtBuilder::boolean(bool v) {
  return arith::ConstantIntOp::create(b, loc, b.getI1Type(), v);
}

Value SimtBuilder::add(Value a, Value c) {
  if (isFloatLike(a))
    return arith::AddFOp::create(b, loc, a, c);
  return arith::AddIOp::create(b, loc, a, c);
}
Value SimtBuilder::sub(Value a, Value c) {
  if (isFloatLike(a))
    return arith::SubFOp::create(b, loc, a, c);
  return arith::SubIOp::create(b, loc, a, c);
}
Value SimtBuilder::mul(Value a, Value c) {
  if (isFloatLike(a))
    return arith::MulFOp::create(b, loc, a, c);
  return arith::MulIOp::create(b, loc, a, c);
}
Value SimtBuilder::div(Value a, Value c) {
  if (isFloatLike(a))
    return arith::DivFOp::create(b, loc, a, c);
  return arith::DivUIOp::create(b, loc, a, c);
}
Value SimtBuilder::rem(Value a, Value c) {
  return arith::RemUIOp::create(b, loc, a, c);
}
Value SimtBuilder::min(Value a, Value c) {
  if (isFloatLike(a))
    return arith::MinimumFOp::create(b, loc, a, c);
  return arith::MinUIOp::create(b, loc, a, c);
}
Value SimtBuilder::max(Value a, Value c) {
  // maximumf propagates NaN, as the float64 reference does.
  if (isFloatLike(a))
    return arith::MaximumFOp::create(b, loc, a, c);
  return arith::MaxUIOp::create(b, loc, a, c);
}
Value SimtBuilder::neg(Value a) { return arith::NegFOp::create(b, loc, a); }
Value SimtBuilder::fma(Value a, Value c, Value d) {
  return math::FmaOp::create(b, loc, a, c, d);
}
Value SimtBuilder::lt(Value a, Value c) {
  if (isFloatLike(a))
    return arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OLT, a, c);
  return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, a, c);
}
Value SimtBuilder::eq(Value a, Value c) {
  if (isFloatLike(a))
    return arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ, a, c);
  return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, a, c);
}
Value SimtBuilder::select(Value cond, Value t, Value f) {
  return arith::SelectOp::create(b, loc, cond, t, f);
}
Value SimtBuilder::andi(Value a, Value c) {
  return arith::AndIOp::create(b, loc, a, c);
}

Value SimtBuilder::exp(Value a) { return math::ExpOp::create(b, loc, a); }
Value SimtBuilder::log(Value a) { return math::LogOp::create(b, loc, a); }
Value SimtBuilder::exp2(Value a) { return math::Exp2Op::create(b, loc, a); }
/// An f32 -> f32 NVVM intrinsic (a single MUFU instruction).
static Value nvvmUnary(SimtBuilder &kb, const char *intrinsic, Value a) {
  return LLVM::CallIntrinsicOp::create(kb.b, kb.loc, kb.b.getF32Type(),
                                       kb.b.getStringAttr(intrinsic), ValueRange{a})
      .getResult(0);
}
Value SimtBuilder::log2(Value a) {
  // libdevice's log2f is a ~20-instruction polynomial; lg2.approx.f32 is one
  // MUFU instruction (max abs error ~2^-22 on [0.5, 2]).
  return nvvmUnary(*this, "llvm.nvvm.lg2.approx.f", a);
}
Value SimtBuilder::sqrt(Value a) { return math::SqrtOp::create(b, loc, a); }
Value SimtBuilder::rsqrtApprox(Value a) {
  return nvvmUnary(*this, "llvm.nvvm.rsqrt.approx.f", a);
}
Value SimtBuilder::sigmoidApprox(Value a) {
  Value e = nvvmUnary(*this, "llvm.nvvm.ex2.approx.f32", mul(a, f32(-1.4426950408889634)));
  return nvvmUnary(*this, "llvm.nvvm.rcp.approx.ftz.f", add(f32(1.0), e));
}
Value SimtBuilder::sigmoid(Value a) {
  Value one = constLike(a, 1.0);
  return div(one, add(one, exp(neg(a))));
}

Value SimtBuilder::toF32(Value a) {
  Type t = a.getType();
  Type f32Type = b.getF32Type();
  if (auto vt = dyn_cast<VectorType>(t)) {
    if (vt.getElementType().isF32())
      return a;
    return arith::ExtFOp::create(b, loc, vt.clone(f32Type), a);
  }
  if (t.isF32())
    return a;
  return arith::ExtFOp::create(b, loc, f32Type, a);
}

Value SimtBuilder::toF64(Value a) {
  if (a.getType().isF64())
    return a;
  return arith::ExtFOp::create(b, loc, b.getF64Type(), a);
}

Value SimtBuilder::toType(Value a, Type elemType) {
  Type t = a.getType();
  auto vt = dyn_cast<VectorType>(t);
  Type target = vt ? Type(vt.clone(elemType)) : elemType;
  if (target == t)
    return a;
  return arith::TruncFOp::create(b, loc, target, a);
}

Value SimtBuilder::indexToI64(Value a) {
  return arith::IndexCastOp::create(b, loc, b.getI64Type(), a);
}
Value SimtBuilder::indexToI32(Value a) {
  return arith::IndexCastOp::create(b, loc, b.getI32Type(), a);
}
Value SimtBuilder::i64ToIndex(Value a) {
  return arith::IndexCastOp::create(b, loc, b.getIndexType(), a);
}

Value SimtBuilder::packBf16x2(Value lo, Value hi) {
  auto bf16 = [&](Value v) { return v.getType().isBF16() ? v : toType(v, b.getBF16Type()); };
  Value v = vector::FromElementsOp::create(
      b, loc, VectorType::get({2}, b.getBF16Type()), ValueRange{bf16(lo), bf16(hi)});
  return LLVM::BitcastOp::create(b, loc, b.getI32Type(), v);
}
