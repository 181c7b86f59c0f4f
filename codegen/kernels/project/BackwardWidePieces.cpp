//===- BackwardWidePieces.cpp - the one-wave backward's x and gx in pieces ===//
//
// Where x's rows are 8- or 4-byte aligned (K % 8 = 4, 2, 6: n = 6 at C % 4
// != 0), no tensor map describes them (TMA strides and box starts are
// 16-byte multiples). The boxes keep their layout (16 tokens x 128 bytes
// in the 128-byte swizzle, so the consumers' wgmma and ldmatrix are
// unchanged), filled by the producer warpgroup's cp.async pieces of the
// rows' alignment and written out by the consumers' st.global pieces,
// which add acc where the spec has it.
//
//===----------------------------------------------------------------------===//

#include "builder/Streams.h"
#include "builder/WavePacer.h"
#include "kernels/project/BackwardWide.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include <optional>

using namespace mlir;
using namespace mlir::mhc;
using namespace mlir::mhc::wide;

/// Piece t + 128 r of a step's boxes from box `firstBox` on (t < 128 a
/// thread of a warpgroup, r a constant): piece t % perRow of token row
/// t / perRow + (r rowsPerR) % 16 of box firstBox + r rowsPerR / 16, where
/// 128 threads take rowsPerR = 128 / perRow whole rows (8 or 4, which
/// divide 16); its 16-byte chunk c of the row at c ^ (row % 8), as TMA's
/// swizzle puts it. Written so that only the thread's part is a value and
/// the rest constants (the producer has kPiecesProducerRegs registers).
WidePiece WideMain::piece(Value t, int64_t r, int64_t firstBox) {
  const int64_t perRow = 128 / p.piece, rowsPerR = 128 / perRow;
  const int64_t rowC = (r * rowsPerR) % kRows, box = firstBox + r * rowsPerR / kRows;
  Value pc = kb.rem(t, kb.idx(perRow)), rowT = kb.div(t, kb.idx(perRow));
  Value inRow = kb.mul(pc, kb.idx(p.piece));
  Value chunk = arith::XOrIOp::create(kb.b, kb.loc, kb.div(inRow, kb.idx(16)),
                                      kb.add(rowT, kb.idx(rowC % 8)));
  Value byte = kb.add(kb.add(kb.mul(rowT, kb.idx(128)), kb.mul(chunk, kb.idx(16))),
                      kb.add(kb.rem(inRow, kb.idx(16)), kb.idx(box * kBoxBytes + rowC * 128)));
  return {kb.add(kb.mul(pc, kb.idx(p.piece / 2)), kb.idx(box * 64)),
          kb.add(rowT, kb.idx(rowC)), byte};
}

/// Step i's x boxes into stage st: thread t of the warpgroup copies pieces
/// t, t + 128, ..., zeros past M and K (a piece lies wholly on one side of
/// K: K is a multiple of its elements); the copies' landing is the thread's
/// arrival on the stage's full mbarrier.
void WideMain::copyPieces(Value i, Value st) {
  const int64_t count = p.boxes * kRows * (128 / p.piece) / 128;
  Value m0 = kb.mul(i, kb.idx(kRows)), at = kb.sharedPtr(smem, stageAt(st));
  for (int64_t r = 0; r < count; ++r) {
    WidePiece pc = piece(tid, r, 0);
    Value row = kb.add(m0, pc.row), col = kb.add(colBase, pc.col);
    Value ok = kb.andi(kb.lt(row, l.tokens()), kb.lt(col, kb.idx(p.K)));
    Value src = kb.select(ok, kb.add(kb.mul(row, kb.idx(p.K)), col), kb.idx(0));
    kb.copyAsync(kb.bytePtr(at, pc.byte), kb.globalPtr(l.arg("x"), src), p.piece,
                 kb.select(ok, kb.i32(p.piece), kb.i32(0)));
  }
  kb.copyAsyncArrive(ring.full(st));
}

/// The producer warpgroup in pieces: each thread waits for the stage to
/// be free and copies its pieces of x; thread 0 first paces and
/// bulk-copies the step's image of gh (the stage's phase needs its arrival,
/// so the others run at most the ring ahead of it).
void WideMain::producePieces() {
  Value leader = kb.eq(tid, kb.idx(0));
  Value steps = kb.mul(pairsOf(l.tokens()), kb.idx(2));
  std::optional<WavePacer> pacer;
  kb.when(leader, [&] { pacer.emplace(makePacer()); });
  kb.loop(kb.idx(0), steps, kb.idx(1), [&](Value i) {
    kb.when(leader, [&] { pacer->before(i); });
    ring.produce(i, [&](Value st) {
      kb.when(leader, [&] { issueStep(i, st); });
      copyPieces(i, st);
    });
    kb.when(leader, [&] { pacer->after(i); });
  });
  kb.when(leader, [&] { pacer->finish(steps, steps); });
}

/// The pair's gx boxes of this consumer (written in place by every thread
/// of the warpgroup, after its barrier): thread ct stores pieces ct, ct +
/// 128, ... of each step, below M and K, plus acc where the spec has it
/// (gx rounded to bf16, then one f32 add: launch "acc"'s bits).
void WideMain::storePieces(const WideConsumer &cs, const WidePair &pr) {
  const int64_t elems = p.piece / 2, count = cs.nb * kRows * (128 / p.piece) / 128;
  auto pieceType = VectorType::get({elems}, kb.b.getBF16Type());
  for (int64_t h = 0; h < 2; ++h) {
    Value m0 = kb.mul(kb.add(pr.i0, kb.idx(h)), kb.idx(kRows));
    for (int64_t r = 0; r < count; ++r) {
      WidePiece pc = piece(cs.ct, r, cs.first);
      Value row = kb.add(m0, pc.row), col = kb.add(colBase, pc.col);
      Value words = kb.vload(smem, kb.add(pr.at[h], kb.div(pc.byte, kb.idx(4))), p.piece / 4);
      Value own = vector::BitCastOp::create(kb.b, kb.loc, pieceType, words);
      kb.when(kb.andi(kb.lt(row, l.tokens()), kb.lt(col, kb.idx(p.K))), [&] {
        Value at = kb.add(kb.mul(row, kb.idx(p.K)), col);
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
    }
  }
}
