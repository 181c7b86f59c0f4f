//===- Fragments.cpp - shared matrix fragments ----------------------------===//

#include "kernels/project/Fragments.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"

#include <cmath>

using namespace mlir;
using namespace mlir::mhc;

Value mlir::mhc::coreMatrixByte(KernelBuilder &kb, Value r, Value c, int64_t rStride,
                                int64_t cStride) {
  return kb.add(kb.add(kb.mul(kb.div(r, kb.idx(8)), kb.idx(rStride)),
                       kb.mul(kb.div(c, kb.idx(8)), kb.idx(cStride))),
                kb.add(kb.mul(kb.rem(r, kb.idx(8)), kb.idx(16)),
                       kb.mul(kb.rem(c, kb.idx(8)), kb.idx(2))));
}

Value mlir::mhc::alignedFloatIndex(KernelBuilder &kb, Value mem, int64_t align) {
  Value addr = LLVM::PtrToIntOp::create(kb.b, kb.loc, kb.b.getI64Type(),
                                        kb.sharedPtr(mem, kb.idx(0)));
  Value addrIdx = arith::IndexCastOp::create(kb.b, kb.loc, kb.b.getIndexType(), addr);
  Value lead = kb.rem(kb.sub(kb.idx(align), kb.rem(addrIdx, kb.idx(align))), kb.idx(align));
  return kb.div(lead, kb.idx(4));
}

/// The P bf16 parts of phi w at one element (w absent: phi): part 0 is
/// rn(v), part p the rounded rest after parts 0..p-1; zeros where `valid`
/// is false (rows past N).
SmallVector<Value> mlir::mhc::bf16Parts(KernelBuilder &kb, Value phi, Value w, Value valid,
                             int64_t P) {
  Value r = w ? kb.mul(phi, w) : phi;
  r = kb.select(valid, r, kb.f32(0.0));
  SmallVector<Value> parts;
  for (int64_t p = 0; p < P; ++p) {
    parts.push_back(kb.toType(r, kb.b.getBF16Type()));
    if (p + 1 < P)
      r = kb.sub(r, kb.toF32(parts.back()));
  }
  return parts;
}

int64_t mlir::mhc::tokenShares(double slots, int64_t slices, double mainBytes,
                               int64_t width) {
  int64_t shares = 1;
  double best = 0;
  for (int64_t s = 1; s <= 64; ++s) {
    double waves = slices * s / slots;
    double cost = mainBytes * std::ceil(waves) / waves + 8.0 * s * width;
    if (s == 1 || cost < best)
      best = cost, shares = s;
  }
  return shares;
}
