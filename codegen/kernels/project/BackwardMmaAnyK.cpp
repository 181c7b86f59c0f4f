//===- BackwardMmaAnyK.cpp - the mma.sync backward's rows at any K -------===//
//
// x's rows at K = n*C not a multiple of 8 (issue 35; docs/design/project.md,
// "Any K"): the lane's columns loaded and stored in pieces masked at K, x
// at 2-byte rows as aligned words shifted by a half-word, and the block
// ring's row shift.
//
//===----------------------------------------------------------------------===//

#include "kernels/project/BackwardMmaMain.h"
#include "kernels/project/Fragments.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;
using namespace mlir::mhc;

/// Whether the lane's column colBase + offset is < K (false where the lane
/// is not active).
Value MmaMain::colsIn(int64_t offset) {
  if (offset == 0)
    return active;
  return kb.andi(active, kb.lt(kb.add(colBase, kb.idx(offset)), kb.idx(p.K)));
}

/// One x piece of `unit` bytes (x element xOff) to the ring's `dst`
/// (xSlotPtr), zeros where !ok.
void MmaMain::copyX(Value dst, Value xOff, Value ok) {
  kb.copyAsync(dst, kb.globalPtr(l.arg("x"), xOff), p.unit,
               kb.select(ok, kb.i32(p.unit), kb.i32(0)));
}

/// wordCopy: the lane's columns of x row `row` (element xOff, the lane's
/// first column) as the laneCols / 2 + 1 aligned words from the one at or
/// below xOff, into slot u of the lane. A word past the row's end, or every
/// word where !ok, is zero-filled (every word copied holds a byte of x).
void MmaMain::copyXWords(Value base, int u, Value xOff, Value row, Value ok) {
  Value first = kb.sub(xOff, kb.rem(xOff, kb.idx(2)));
  Value rowEnd = kb.mul(kb.add(row, kb.idx(1)), kb.idx(p.K));
  Value slot = kb.add(base, kb.mul(kb.add(kb.idx(u * 32), lane), kb.idx(p.laneCols)));
  for (int64_t w = 0; w <= p.laneCols / 2; ++w) {
    Value src = kb.add(first, kb.idx(2 * w));
    Value in = kb.andi(ok, kb.lt(src, rowEnd));
    kb.copyAsync(kb.sharedPtr(ring, kb.add(slot, kb.idx(w))),
                 kb.globalPtr(l.arg("x"), kb.select(in, src, kb.idx(0))), 4,
                 kb.select(in, kb.i32(4), kb.i32(0)));
  }
}

/// wordCopy: the lane's laneCols x values of slot u (row `row`, clamped)
/// as f32, the words shifted by 16 bits where the row starts at an odd
/// element (K odd, the lane's first column even); zeros at columns past K.
SmallVector<Value> MmaMain::readXWords(Value base, int u, Value row) {
  Value slot = kb.add(base, kb.mul(kb.add(kb.idx(u * 32), lane), kb.idx(p.laneCols)));
  SmallVector<Value> words;
  for (int64_t w = 0; w < p.laneCols; w += 4) {
    int64_t count = std::min<int64_t>(4, p.laneCols - w);
    auto type = VectorType::get({count}, kb.b.getI32Type());
    Value v = LLVM::LoadOp::create(kb.b, kb.loc, type, kb.sharedPtr(ring, kb.add(slot, kb.idx(w))), 4 * count);
    for (int64_t e = 0; e < count; ++e)
      words.push_back(kb.extract(v, e));
  }
  Value bits = kb.indexToI32(kb.mul(kb.rem(row, kb.idx(2)), kb.idx(16)));
  SmallVector<Value> out;
  for (int64_t w = 0; w < p.laneCols / 2; ++w) {
    Value word = LLVM::FshrOp::create(kb.b, kb.loc, words[w + 1], words[w], bits);
    Type pair = VectorType::get({2}, cast<VectorType>(actVec).getElementType());
    Value f = kb.toF32(vector::BitCastOp::create(kb.b, kb.loc, pair, kb.vector({word})));
    for (int64_t e = 0; e < 2; ++e) {
      Value v = kb.extract(f, e);
      out.push_back(masked() ? kb.select(colsIn(2 * w + e), v, zero) : v);
    }
  }
  return out;
}

/// The lane's laneCols columns of a row as f32 (zeros past K), `at(col)`
/// the offset of the row's column col; with masks (K % laneCols != 0) in
/// pieces of colPiece, each read only where it lies before K.
SmallVector<Value> MmaMain::loadLaneCols(Value mem, function_ref<Value(Value)> at) {
  if (!masked())
    return loadRun(kb, mem, at(col0), p.laneCols);
  SmallVector<Value> out;
  for (int64_t i = 0; i < p.laneCols; i += p.colPiece) {
    Value ok = colsIn(i);
    Value col = kb.select(ok, kb.add(col0, kb.idx(i)), kb.idx(0));
    for (Value v : kb.loadF32(mem, at(col), p.colPiece))
      out.push_back(kb.select(ok, v, zero));
  }
  return out;
}

/// Stores the lane's columns of a row (at(col) as above), those before K.
void MmaMain::storeLaneCols(ArrayRef<Value> vals, Value mem,
                            function_ref<Value(Value)> at) {
  if (!masked()) {
    kb.storeFrom(vals, mem, at(col0));
    return;
  }
  for (int64_t i = 0; i < p.laneCols; i += p.colPiece)
    kb.when(colsIn(i), [&] {
      kb.storeFrom(vals.slice(i, p.colPiece), mem, at(kb.add(col0, kb.idx(i))));
    });
}

/// The shared address of xSlot's piece (pieces of 4 bytes or more).
Value MmaMain::xSlotPtr(Value base, int64_t u, int64_t c) {
  assert(!p.wordCopy && "2-byte rows go by copyXWords");
  return kb.sharedPtr(ring, xSlot(base, u, c));
}

/// Bytes from the 16-byte boundary at or below x's row `row` (its block's
/// slice) to the row's start: 0, or 8 at xAlign 8 (block ring).
Value MmaMain::rowShift(Value row) {
  Value start = kb.add(kb.mul(row, kb.idx(p.K)), sliceCol);
  return kb.mul(arith::AndIOp::create(kb.b, kb.loc, start, kb.idx(16 / p.actBytes - 1)),
                kb.idx(p.actBytes));
}
