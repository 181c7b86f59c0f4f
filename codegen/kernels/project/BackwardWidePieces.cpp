//===- BackwardWidePieces.cpp - the one-wave backward's gx in pieces ------===//
//
// Where x's rows are 8- or 4-byte aligned (K % 8 = 4, 2, 6: n = 6 at C % 4
// != 0), no tensor map stores gx token by token: the consumers write it
// out of the boxes in st.global pieces, 16 bytes for phase map 0's rows
// (16-byte aligned) and the rows' alignment for the others, adding acc
// where the spec has it. (x comes in by phase maps: BackwardWidePhases.cpp.)
//
//===----------------------------------------------------------------------===//

#include "builder/Streams.h"
#include "kernels/project/BackwardWide.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;
using namespace mlir::mhc;
using namespace mlir::mhc::wide;

/// Piece `item` of box rows [row0, row0 + rows) of boxes firstBox, ... in
/// pieces of `bytes`: piece item % perRow of row row0 + (item / perRow) %
/// rows of box firstBox + item / (perRow rows); its 16-byte chunk c of the
/// row at c ^ (row % 8), as TMA's swizzle puts it.
WidePiece WideMain::rowPiece(Value item, int64_t row0, int64_t rows, int64_t bytes,
                             int64_t firstBox) {
  const int64_t perRow = 128 / bytes;
  Value pc = kb.rem(item, kb.idx(perRow)), rest = kb.div(item, kb.idx(perRow));
  Value row = kb.add(kb.rem(rest, kb.idx(rows)), kb.idx(row0));
  Value box = kb.add(kb.div(rest, kb.idx(rows)), kb.idx(firstBox));
  Value inRow = kb.mul(pc, kb.idx(bytes));
  Value chunk = arith::XOrIOp::create(kb.b, kb.loc, kb.div(inRow, kb.idx(16)),
                                      kb.rem(row, kb.idx(8)));
  Value byte = kb.add(kb.add(kb.mul(box, kb.idx(kBoxBytes)), kb.mul(row, kb.idx(128))),
                      kb.add(kb.mul(chunk, kb.idx(16)), kb.rem(inRow, kb.idx(16))));
  return {kb.add(kb.mul(box, kb.idx(64)), kb.div(inRow, kb.idx(2))), row, byte};
}

/// The pair's gx rows of this consumer's boxes (read back by every thread
/// of the warpgroup, after its barrier): rows 0 .. R - 1 in 16-byte pieces,
/// the others in pieces of their alignment, below M and K, plus acc where
/// the spec has it (gx rounded to bf16, then one f32 add: launch "acc"'s
/// bits).
void WideMain::storePieces(const WideConsumer &cs, const WidePair &pr) {
  const int64_t R = p.phaseRows;
  for (int64_t h = 0; h < 2; ++h) {
    Value m0 = kb.mul(kb.add(pr.i0, kb.idx(h)), kb.idx(kRows));
    for (auto [row0, rows, bytes] : {std::tuple<int64_t, int64_t, int64_t>{0, R, 16},
                                     {R, kRows - R, p.piece}}) {
      const int64_t items = cs.nb * rows * (128 / bytes);
      for (int64_t k = 0; k < (items + 127) / 128; ++k) {
        Value item = kb.add(cs.ct, kb.idx(128 * k));
        WidePiece pc = rowPiece(item, row0, rows, bytes, cs.first);
        Value row = kb.add(m0, stepToken(kb, p, pc.row));
        Value ok = kb.lt(row, l.tokens());
        if ((k + 1) * 128 > items)
          ok = kb.andi(ok, kb.lt(item, kb.idx(items)));
        storeRowPiece(pr.at[h], pc, kb.mul(row, kb.idx(p.K)), bytes, ok);
      }
    }
  }
}

/// A piece of a gx row (`bytes` wide, from element `rowAt`) where `ok`,
/// below K: whole where it ends by K, else (a 16-byte piece of map 0's rows
/// across K) in pieces of the rows' alignment, which K's end does not cut.
void WideMain::storeRowPiece(Value stage, const WidePiece &pc, Value rowAt, int64_t bytes,
                             Value ok) {
  Value col = kb.add(colBase, pc.col), end = kb.add(col, kb.idx(bytes / 2 - 1));
  storePiece(stage, pc.byte, kb.add(rowAt, col), bytes, kb.andi(ok, kb.lt(end, kb.idx(p.K))));
  if (bytes == p.piece)
    return;
  Value cut = kb.andi(ok, kb.lt(kb.idx(p.K), end)); // (K - col: a multiple of the pieces)
  for (int64_t e = 0; e < bytes / 2; e += p.piece / 2) {
    Value at = kb.add(col, kb.idx(e));
    storePiece(stage, kb.add(pc.byte, kb.idx(2 * e)), kb.add(rowAt, at), p.piece,
               kb.andi(cut, kb.lt(at, kb.idx(p.K))));
  }
}

/// `bytes` of gx from the stage's byte `byte` to gx's element `at` where
/// `ok`, plus acc where the spec has it; gx's and acc's accesses `bytes`
/// wide (map 0's rows are 16-byte aligned, limitRowAccesses' limit is the
/// others').
void WideMain::storePiece(Value stage, Value byte, Value at, int64_t bytes, Value ok) {
  const int64_t elems = bytes / 2;
  auto pieceType = VectorType::get({elems}, kb.b.getBF16Type());
  kb.withAccessLimit(bytes, [&] {
    Value words = kb.vload(smem, kb.add(stage, kb.div(byte, kb.idx(4))), bytes / 4);
    Value own = vector::BitCastOp::create(kb.b, kb.loc, pieceType, words);
    kb.when(ok, [&] {
      if (!spec.readsAcc()) {
        kb.vstore(own, l.arg("gx"), at);
        return;
      }
      SmallVector<Value> acc = kb.loadF32(l.arg("acc"), at, elems), sum;
      Value ownF32 = kb.toF32(own);
      for (int64_t e = 0; e < elems; ++e)
        sum.push_back(plusAcc(kb, spec, kb.extract(ownF32, e), acc[e]));
      kb.storeFrom(sum, l.arg("gx"), at);
    });
  });
}
