//===- ForwardStagedRows.cpp - the staged forward's x at unaligned rows ---===//
//
// At K % 8 = 2 or 6 x's rows start 0, 4, 8 or 12 bytes past a 16-byte
// boundary, at K % 8 = 4 0 or 8, at odd K any even count (docs/design/
// project.md, "Realigned x", "Rows by parity" and "Odd K"). At 2- and
// 4-byte rows where the products leave registers for it (n <= 3), a lane's
// 16 bytes come as the two aligned granules that hold them, shifted by
// words and at 2-byte rows by a half-word (realignX); on wgmma, whose
// registers do not, an m-tile's even tokens take rows g and its odd ones
// rows g + 8, each read in as few loads as its alignment allows
// (parityRows, at 2-, 4- and 8-byte rows). Else at 2-byte rows five aligned
// 4-byte words funnel-shifted by a half-word (halfRows; by parity only the
// odd rows). The masked last chunk is ForwardStagedAnyK.cpp's.
//
//===----------------------------------------------------------------------===//

#include "kernels/project/ForwardStagedLaunches.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;
using namespace mlir::mhc;

Value mlir::mhc::shiftWords(KernelBuilder &kb, Value first, Value second,
                            Value bit0, Value bit1, Value halfBits) {
  SmallVector<Value> in = xWords(kb, first);
  in.append(xWords(kb, second));
  // Two words where bit1, then one more where bit0: 9 selects; with
  // halfBits a fifth word (11) and four funnel shifts.
  int64_t keep = halfBits ? 5 : 4;
  SmallVector<Value> by2, out;
  for (int64_t e = 0; e < keep + 1; ++e)
    by2.push_back(kb.select(bit1, in[e + 2], in[e]));
  for (int64_t e = 0; e < keep; ++e)
    out.push_back(kb.select(bit0, by2[e + 1], by2[e]));
  if (halfBits)
    for (int64_t e = 0; e < 4; ++e)
      out[e] = LLVM::FshrOp::create(kb.b, kb.loc, out[e + 1], out[e], halfBits);
  out.resize(4);
  return xFromWords(kb, out, cast<VectorType>(first.getType()).getElementType());
}

/// realignX: each row's shift from 16 bytes, and the granules' offsets.
void StagedPartial::locateShifts() {
  // Row m starts (m K) % 8 elements past a 16-byte boundary (an even count
  // at 4-byte rows; at 2-byte rows its low bit is the half-word), and so
  // does each lane's 16 bytes of it.
  for (size_t r = 0; r < xRow.size(); ++r) {
    Value shift = kb.rem(kb.mul(loadRows[r], kb.idx(p.K % 8)), kb.idx(8));
    xRowAligned.push_back(kb.sub(xRow[r], shift));
    xNextStep.push_back(kb.mul(kb.min(shift, kb.idx(1)), kb.idx(8)));
    shiftBit0.push_back(kb.lt(kb.idx(0), kb.andi(shift, kb.idx(2))));
    shiftBit1.push_back(kb.lt(kb.idx(0), kb.andi(shift, kb.idx(4))));
    if (p.xUnit == 1)
      halfShift.push_back(kb.indexToI32(kb.mul(kb.andi(shift, kb.idx(1)), kb.idx(16))));
  }
}

/// parityRows: row r of m-tile r / 2 is token `first` + 2g + r % 2; a row
/// past M loads the last token of its parity (token 0 from element xUnit
/// for the odd rows where M = 1: the odd rows' alignment, and inside x).
void StagedPartial::locateParityRows(Value first, int64_t tileStride) {
  Value inTile = kb.add(first, kb.mul(sk.g, kb.idx(2)));
  Value last = kb.sub(sk.M, kb.idx(1)), one = kb.eq(sk.M, kb.idx(1));
  Value lastEven = kb.sub(last, kb.rem(last, kb.idx(2)));
  Value lastOdd = kb.select(one, kb.idx(0), kb.sub(last, kb.rem(sk.M, kb.idx(2))));
  for (int64_t r = 0; r < 2 * p.mTiles; ++r) {
    rows.push_back(kb.add(inTile, kb.idx(tileStride * (r / 2) + r % 2)));
    loadRows.push_back(kb.min(rows.back(), r % 2 ? lastOdd : lastEven));
    xRow.push_back(kb.add(kb.mul(loadRows.back(), kb.idx(p.K)), kb.mul(sk.t, kb.idx(8))));
    // (At M = 1 the odd rows start at token 0's first element one class
    // past it: 2 bytes at 2-byte rows, 4 at 4-byte rows, 8 at 8-byte rows.)
    xRowSplit.push_back(r % 2 ? kb.add(xRow.back(), kb.select(one, kb.idx(p.xUnit), kb.idx(0)))
                              : xRow.back());
  }
  liveWarp = kb.lt(first, sk.M);
}

/// parityRows: a lane's 16 bytes of row r at column `at` (not the masked
/// chunk). At 2-byte rows four 4-byte loads on the even rows (4-byte
/// aligned), five shifted by a half-word on the odd; at 4-byte rows two
/// 8-byte loads on the even rows, 4, 8 and 4 bytes on the odd; at 8-byte
/// rows one 16-byte load on the even rows (16-byte aligned), two 8-byte
/// ones on the odd.
Value StagedPartial::loadParityRow(int64_t r, Value at) {
  Value x = l.arg("x"), base = kb.add(xRowSplit[r], at), out;
  if (p.xUnit == 1 && r % 2) {
    Value first = kb.sub(base, kb.idx(1));
    return loadHalfRow(first, kb.add(first, kb.idx(8)), kb.indexToI32(kb.idx(16)));
  }
  if (p.xUnit == 1) {
    kb.withAccessLimit(4, [&] { out = kb.vload(x, base, 8); });
    return out;
  }
  bool eightByteRows = p.xUnit == 4;
  kb.withAccessLimit(eightByteRows && r % 2 == 0 ? 16 : 8, [&] {
    if (r % 2 == 0 || eightByteRows) {
      out = kb.vload(x, base, 8);
      return;
    }
    SmallVector<Value> words;
    for (auto [e0, count] : {std::pair<int64_t, int64_t>{0, 2}, {2, 4}, {6, 2}})
      words.append(xWords(kb, kb.vload(x, kb.add(base, kb.idx(e0)), count)));
    out = xFromWords(kb, words, cast<MemRefType>(x.getType()).getElementType());
  });
  return out;
}

/// halfRows: rows of odd tokens start a half-word past a 4-byte boundary
/// (K odd; the lane's and the chunks' columns are even): xRowAligned, the
/// step to the fifth word (8 elements, or 6 where the row is aligned) and
/// halfShift, the i32 funnel shift (16 or 0 bits).
void StagedPartial::locateHalfShifts() {
  for (size_t r = 0; r < xRow.size(); ++r) {
    Value odd = kb.rem(loadRows[r], kb.idx(2));
    xRowAligned.push_back(kb.sub(xRow[r], odd));
    xNextStep.push_back(kb.add(kb.idx(6), kb.mul(odd, kb.idx(2))));
    halfShift.push_back(kb.indexToI32(kb.mul(odd, kb.idx(16))));
  }
}

/// At 2-byte rows: a lane's 16 bytes from the four aligned words at
/// `first` and the word at `fifth`, funnel-shifted by `bits` (i32: 16, or 0
/// where the row is aligned and `fifth` is the fourth again, so that every
/// word holds a byte of x: inside its allocation).
Value StagedPartial::loadHalfRow(Value first, Value fifth, Value bits) {
  Value x = l.arg("x");
  SmallVector<Value> in, out;
  kb.withAccessLimit(4, [&] {
    in = xWords(kb, kb.vload(x, first, 8));
    in.append(xWords(kb, kb.vload(x, fifth, 2)));
  });
  for (int64_t e = 0; e < 4; ++e)
    out.push_back(LLVM::FshrOp::create(kb.b, kb.loc, in[e + 1], in[e], bits));
  return xFromWords(kb, out, cast<MemRefType>(x.getType()).getElementType());
}

/// realignX: chunk i's 16 bytes per (row, pair) from the two granules
/// loadXAnyK loaded; the masked last chunk's are as loaded. (Its plans, one
/// m-tile and no expand, load in the chunk: nothing carries xsNext.)
void StagedPartial::realignRows(Value i, ChunkLoads &in) {
  assert(!p.prefetch() && "realignX loads are not carried a chunk ahead");
  Value shifted = kb.lt(kb.add(sk.cBegin, i), kb.idx(p.chunks() - 1));
  for (int64_t r = 0; r < 2 * p.mTiles; ++r) {
    Value bit0 = kb.andi(shiftBit0[r], shifted), bit1 = kb.andi(shiftBit1[r], shifted);
    Value half = p.xUnit == 1 ? kb.select(shifted, halfShift[r], kb.indexToI32(kb.idx(0))) : Value();
    for (int64_t j = 0; j < p.pairs(); ++j)
      in.xs[r][j] = shiftWords(kb, in.xs[r][j], in.xsNext[r][j], bit0, bit1, half);
  }
  in.xsNext.clear();
}
