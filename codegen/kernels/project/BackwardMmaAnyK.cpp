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
