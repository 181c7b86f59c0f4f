//===- ForwardStagedProducts.cpp - the staged partial's products ----------===//
//
// A chunk's products on the tensor cores (ForwardStaged.cpp): x's words as
// loaded are the A fragments; B from the ring into registers for mma.sync
// m16n8k16, or read through descriptors by wgmma; the rows' sums of squares
// from the same words.
//
//===----------------------------------------------------------------------===//

#include "kernels/project/ForwardStagedLaunches.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;
using namespace mlir::mhc;

SmallVector<Value> mlir::mhc::xWords(KernelBuilder &kb, Value v) {
  auto type = cast<VectorType>(v.getType());
  int64_t count = type.getNumElements() * type.getElementTypeBitWidth() / 32;
  Value w = vector::BitCastOp::create(kb.b, kb.loc, VectorType::get({count}, kb.b.getI32Type()), v);
  SmallVector<Value> out;
  for (int64_t e = 0; e < count; ++e)
    out.push_back(kb.extract(w, e));
  return out;
}

Value mlir::mhc::xFromWords(KernelBuilder &kb, ArrayRef<Value> words, Type elem) {
  auto type = VectorType::get({2 * static_cast<int64_t>(words.size())}, elem);
  return vector::BitCastOp::create(kb.b, kb.loc, type, kb.vector(words));
}

namespace {

/// The bf16 values in the low and high halves of a word, as f32.
std::pair<Value, Value> halves(KernelBuilder &kb, Value w) {
  Type f32 = kb.b.getF32Type();
  Value lo = arith::ShLIOp::create(kb.b, kb.loc, w, kb.i32(16));
  Value hi = kb.andi(w, kb.i32(static_cast<int32_t>(0xFFFF0000u)));
  return {arith::BitcastOp::create(kb.b, kb.loc, f32, lo),
          arith::BitcastOp::create(kb.b, kb.loc, f32, hi)};
}

/// c += A B on the tensor cores: m16n8k16, bf16 operands, f32 accumulators.
void mmaBf16(KernelBuilder &kb, ArrayRef<Value> a, ArrayRef<Value> b,
             MutableArrayRef<Value> c) {
  Type f32 = kb.b.getF32Type();
  auto result = LLVM::LLVMStructType::getLiteral(kb.b.getContext(),
                                                 {f32, f32, f32, f32});
  auto op = NVVM::MmaOp::create(
      kb.b, kb.loc, result, a, b, c, ArrayRef<int64_t>{16, 8, 16},
      std::nullopt, std::nullopt,
      std::array<NVVM::MMATypes, 2>{NVVM::MMATypes::bf16, NVVM::MMATypes::bf16},
      std::array<NVVM::MMALayout, 2>{NVVM::MMALayout::row, NVVM::MMALayout::col});
  for (int64_t e = 0; e < 4; ++e)
    c[e] = LLVM::ExtractValueOp::create(kb.b, kb.loc, op.getResult(),
                                        ArrayRef<int64_t>{e});
}

} // namespace

/// The words of pair j's x rows (A fragments as loaded), their squares
/// added into the rows' sums.
StagedPartial::Rows StagedPartial::pairWords(const Rows &xs, int64_t j,
                                             MutableArrayRef<Value> next) {
  int64_t MT = p.mTiles, accs = p.accs();
  Rows w;
  for (int64_t r = 0; r < 2 * MT; ++r)
    w.push_back(xWords(kb, xs[r][j]));
  for (int64_t mt = 0; mt < MT; ++mt)
    for (int64_t e = 0; e < 4; ++e) {
      auto [a0, a1] = halves(kb, w[2 * mt][e]);
      auto [b0, b1] = halves(kb, w[2 * mt + 1][e]);
      Value &sa = next[accs + 2 * mt], &sb = next[accs + 2 * mt + 1];
      sa = kb.fma(a1, a1, kb.fma(a0, a0, sa));
      sb = kb.fma(b1, b1, kb.fma(b0, b0, sb));
    }
  return w;
}

/// The chunk's products on wgmma: the x words are its A fragments; the
/// products run asynchronously and are waited for before the buffer goes
/// back.
void StagedPartial::wgmmaProducts(const Rows &xs, Value ringBase,
                                  MutableArrayRef<Value> next) {
  int64_t MT = p.mTiles, NT = p.nTiles, P = p.parts;
  kb.wgmmaFence();
  for (int64_t j = 0; j < p.pairs(); ++j) {
    Rows w = pairWords(xs, j, next);
    for (int h = 0; h < 2; ++h)
      for (int64_t part = 0; part < P; ++part) {
        int64_t tile = ((2 * j + h) * P + part) * NT * 256;
        Value desc = kb.wgmmaDescriptor(
            ring, kb.add(ringBase, kb.idx(tile / 4)), /*lbo=*/128, /*sbo=*/256);
        for (int64_t mt = 0; mt < MT; ++mt)
          kb.wgmmaBf16(next.slice(4 * mt * NT, 4 * NT),
                       {w[2 * mt][2 * h], w[2 * mt + 1][2 * h],
                        w[2 * mt][2 * h + 1], w[2 * mt + 1][2 * h + 1]},
                       desc);
      }
  }
  kb.wgmmaCommit();
  kb.wgmmaWait(0);
}

/// Where this lane's 16 bytes of B for (pair j, part, n-tile nt) start in
/// the buffer at ringBase (an f32 index).
Value StagedPartial::bOffset(Value ringBase, int64_t j, int64_t part, int64_t nt) {
  int64_t P = p.parts, NT = p.nTiles;
  return kb.add(ringBase, kb.add(kb.idx(((j * P + part) * NT + nt) * 128),
                                 kb.mul(sk.lane, kb.idx(4))));
}

/// The chunk's products on mma.sync, B read from the buffer into registers.
void StagedPartial::mmaSyncProducts(const Rows &xs, Value ringBase,
                                    MutableArrayRef<Value> next) {
  int64_t MT = p.mTiles, NT = p.nTiles, P = p.parts;
  auto i32x4 = VectorType::get({4}, kb.b.getI32Type());
  auto i32x2 = VectorType::get({2}, kb.b.getI32Type());
  for (int64_t j = 0; j < p.pairs(); ++j) {
    // B: 16 bytes per lane per (part, n-tile), two k-steps' worth;
    // with two m-tiles, 8 bytes per k-step (fewer registers live).
    SmallVector<SmallVector<SmallVector<Value>>> bw(P);
    if (MT == 1)
      for (int64_t part = 0; part < P; ++part)
        for (int64_t nt = 0; nt < NT; ++nt) {
          Value raw = LLVM::LoadOp::create(kb.b, kb.loc, i32x4,
                                           kb.sharedPtr(ring, bOffset(ringBase, j, part, nt)), 16);
          bw[part].push_back(xWords(kb, raw));
        }
    Rows w = pairWords(xs, j, next);
    for (int h = 0; h < 2; ++h) {
      if (MT > 1)
        for (int64_t part = 0; part < P; ++part) {
          bw[part].clear();
          for (int64_t nt = 0; nt < NT; ++nt) {
            Value raw = LLVM::LoadOp::create(
                kb.b, kb.loc, i32x2,
                kb.sharedPtr(ring, kb.add(bOffset(ringBase, j, part, nt), kb.idx(2 * h))), 8);
            SmallVector<Value> four(4);
            four[2 * h] = kb.extract(raw, 0);
            four[2 * h + 1] = kb.extract(raw, 1);
            bw[part].push_back(four);
          }
        }
      // A: rows g and g + 8 at logical k {2t, 2t+1} then {2t+8, 2t+9}.
      SmallVector<SmallVector<Value>> A;
      for (int64_t mt = 0; mt < MT; ++mt)
        A.push_back({w[2 * mt][2 * h], w[2 * mt + 1][2 * h], w[2 * mt][2 * h + 1],
                     w[2 * mt + 1][2 * h + 1]});
      for (int64_t nt = 0; nt < NT; ++nt)
        for (int64_t part = 0; part < P; ++part)
          for (int64_t mt = 0; mt < MT; ++mt)
            mmaBf16(kb, A[mt], {bw[part][nt][2 * h], bw[part][nt][2 * h + 1]},
                    next.slice(4 * (mt * NT + nt), 4));
    }
  }
}
