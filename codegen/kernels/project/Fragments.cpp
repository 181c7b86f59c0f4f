//===- Fragments.cpp - shared matrix fragments ----------------------------===//

#include "kernels/project/Fragments.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

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

SmallVector<Value> mlir::mhc::bf16PartWords(KernelBuilder &kb, Value v0, Value v1) {
  SmallVector<Value> p0 = bf16Parts(kb, v0, Value(), kb.boolean(true), 2);
  SmallVector<Value> p1 = bf16Parts(kb, v1, Value(), kb.boolean(true), 2);
  SmallVector<Value> words;
  for (int64_t part = 0; part < 2; ++part)
    words.push_back(arith::BitcastOp::create(kb.b, kb.loc, kb.b.getF32Type(),
                                             kb.packBf16x2(p0[part], p1[part])));
  return words;
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

/// v rounded to tf32 (10 mantissa bits), to nearest: unbiased, unlike the
/// truncation the tensor core applies to its operands.
Value mlir::mhc::roundTf32(KernelBuilder &kb, Value v) {
  Value bits = arith::BitcastOp::create(kb.b, kb.loc, kb.b.getI32Type(), v);
  Value rounded = arith::AddIOp::create(kb.b, kb.loc, bits, kb.i32(0x1000));
  Value mask = kb.i32(static_cast<int32_t>(0xFFFFE000u));
  return arith::BitcastOp::create(kb.b, kb.loc, kb.b.getF32Type(),
                                  kb.andi(rounded, mask));
}

/// Loads `count` consecutive elements as f32 in accesses of at most 16 bytes.
SmallVector<Value> mlir::mhc::loadRun(KernelBuilder &kb, Value mem, Value offset,
                           int64_t count) {
  int64_t bytes = cast<MemRefType>(mem.getType()).getElementTypeBitWidth() / 8;
  int64_t piece = std::min<int64_t>(count, 16 / bytes);
  SmallVector<Value> out;
  for (int64_t i = 0; i < count; i += piece) {
    SmallVector<Value> part = kb.loadF32(mem, kb.add(offset, kb.idx(i)), piece);
    out.append(part.begin(), part.end());
  }
  return out;
}

/// v = hi + lo with hi the nearest tf32 value and lo the (rounded) rest:
/// hi * b + lo * b carries ~21 bits of v.
std::pair<Value, Value> mlir::mhc::splitTf32(KernelBuilder &kb, Value v) {
  Value hi = roundTf32(kb, v);
  return {hi, roundTf32(kb, kb.sub(v, hi))};
}

/// The tf32 parts of each value: hi (rounded to nearest) and, with `split`,
/// lo (the rounded rest); without it only hi, which the tf32 mode multiplies.
std::pair<SmallVector<Value>, SmallVector<Value>>
mlir::mhc::tf32Parts(KernelBuilder &kb, ArrayRef<Value> values, bool split) {
  SmallVector<Value> hi, lo;
  for (Value v : values) {
    if (!split) {
      hi.push_back(roundTf32(kb, v));
      continue;
    }
    auto [h, l] = splitTf32(kb, v);
    hi.push_back(h);
    lo.push_back(l);
  }
  return {hi, lo};
}

Value mlir::mhc::fragment(KernelBuilder &kb, ArrayRef<Value> elems) {
  auto type = VectorType::get({static_cast<int64_t>(elems.size()), 1},
                              kb.b.getF32Type());
  return vector::FromElementsOp::create(kb.b, kb.loc, type, elems);
}

Value mlir::mhc::mma(KernelBuilder &kb, Value a, Value b, Value c) {
  return nvgpu::MmaSyncOp::create(kb.b, kb.loc, a, b, c,
                                  ArrayRef<int64_t>{16, 8, 8},
                                  /*tf32Enabled=*/true);
}
