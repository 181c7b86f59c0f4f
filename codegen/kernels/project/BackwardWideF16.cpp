//===- BackwardWideF16.cpp - the one-wave backward's f16 planes -----------===//
//
// phi and gh as f16 planes scaled by powers of two (BackwardWide.cpp says
// why): the scale of a magnitude, the largest magnitude over lanes, and
// the f16 and bf16 words.
//
//===----------------------------------------------------------------------===//

#include "kernels/project/BackwardWide.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"

using namespace mlir;
using namespace mlir::mhc;

std::pair<Value, Value> wide::f16Scale(KernelBuilder &kb, Value mag) {
  Type f32 = kb.b.getF32Type();
  Value e = kb.div(mag, kb.i32(1 << 23)); // the exponent field, 0..255
  Value f = kb.min(kb.sub(kb.i32(268), kb.min(e, kb.i32(254))), kb.i32(253));
  f = kb.select(kb.eq(e, kb.i32(255)), kb.i32(127), f); // 127 + log2(scale)
  Value inv = kb.sub(kb.i32(254), f);
  auto pow2 = [&](Value field) {
    return arith::BitcastOp::create(kb.b, kb.loc, f32, kb.mul(field, kb.i32(1 << 23)))
        .getResult();
  };
  return {pow2(f), pow2(inv)};
}

Value wide::magnitudeBits(KernelBuilder &kb, Value v) {
  Value bits = arith::BitcastOp::create(kb.b, kb.loc, kb.b.getI32Type(), kb.toF32(v));
  return kb.andi(bits, kb.i32(0x7fffffff));
}

Value wide::laneGroupMax(KernelBuilder &kb, Value v, int lanes) {
  Type f32 = kb.b.getF32Type(), i32 = kb.b.getI32Type();
  for (int off = lanes / 2; off >= 1; off /= 2) {
    Value other = kb.shuffleXor(arith::BitcastOp::create(kb.b, kb.loc, f32, v), off);
    v = kb.max(v, arith::BitcastOp::create(kb.b, kb.loc, i32, other).getResult());
  }
  return v;
}

Value wide::packF16x2(KernelBuilder &kb, Value v0, Value v1) {
  Type f16 = kb.b.getF16Type();
  Value v = kb.vector({kb.toType(v0, f16), kb.toType(v1, f16)});
  Value word = LLVM::BitcastOp::create(kb.b, kb.loc, kb.b.getI32Type(), v);
  return arith::BitcastOp::create(kb.b, kb.loc, kb.b.getF32Type(), word);
}

Value wide::unpackBf16(KernelBuilder &kb, Value word, int64_t e) {
  Value bits = e == 0 ? kb.mul(word, kb.i32(1 << 16))
                      : kb.andi(word, kb.i32(static_cast<int32_t>(0xffff0000u)));
  return arith::BitcastOp::create(kb.b, kb.loc, kb.b.getF32Type(), bits).getResult();
}
