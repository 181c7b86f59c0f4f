//===- BackwardWidePhases.cpp - the one-wave backward's x by phase maps ---===//
//
// Where x's rows are 8- or 4-byte aligned (K % 8 = 4, 2, 6: n = 6 at C % 4
// != 0), no tensor map describes them token by token (TMA's strides and
// box starts are 16-byte multiples), but every P-th token's rows are
// (WidePlan::phases). The boxes keep their layout (16 tokens x 128 bytes
// in the 128-byte swizzle, so the consumers' wgmma and ldmatrix are
// unchanged): the issuing thread loads phase map 0 into their rows 0 .. R
// - 1 and the other maps into a staging slot, which the producer
// warpgroup's other warps copy into rows R .. 15, undoing each map's shift.
//
//===----------------------------------------------------------------------===//

#include "builder/WavePacer.h"
#include "kernels/project/BackwardWide.h"

using namespace mlir;
using namespace mlir::mhc;
using namespace mlir::mhc::wide;

Value WideMain::slotAt(Value slot) { // floats
  return kb.add(kb.add(phiAt, kb.idx(p.stagingAt / 4)), kb.mul(slot, kb.idx(p.slotBytes / 4)));
}

Value WideMain::slotBar(Value slot, bool free) { // full, or free
  return kb.sharedPtr(l.shared(1),
                      kb.add(kb.idx(2 * p.stages + 1 + (free ? p.slots : 0)), slot));
}

/// The issuing thread: step i's boxes of phase maps 1 .. P - 1 into slot
/// i % slots, once the unpackers have copied step i - slots out of it: one
/// copy per map, or (`edge`: the steps from the one that holds token M - 1,
/// whose row's last granule would pass x's end) a copy per row and granule
/// through the edge maps.
void WideMain::issueStaged(Value i, bool edge) {
  Value slot = kb.rem(i, kb.idx(p.slots)), bar = slotBar(slot, false), at = slotAt(slot);
  kb.when(kb.lt(kb.idx(p.slots - 1), i), [&] {
    Value use = kb.sub(kb.div(i, kb.idx(p.slots)), kb.idx(1));
    kb.mbarrierWait(slotBar(slot, true), kb.indexToI32(kb.rem(use, kb.idx(2))));
  });
  const int64_t G = kStagedGranule, granules = p.stagedWidth / G;
  Value row = kb.indexToI32(kb.mul(i, kb.idx(p.phaseRows)));
  Value granule = kb.div(colBase, kb.idx(G));
  kb.mbarrierArriveExpectTx(bar, (p.phases - 1) * p.phaseRows * p.stagedWidth * 2);
  auto boxAt = [&](int64_t r, Value element) { // floats
    return kb.sharedPtr(smem, kb.add(at, kb.add(kb.idx((r - 1) * p.stagedBoxBytes / 4),
                                                kb.div(element, kb.idx(2)))));
  };
  if (!edge) {
    for (int64_t r = 1; r < p.phases; ++r)
      kb.tensorLoad3d(boxAt(r, kb.idx(0)), l.arg(phaseMap(p, r)), kb.indexToI32(granule), row,
                      bar);
    return;
  }
  kb.loop(kb.idx(0), kb.idx(p.phaseRows * granules), kb.idx(1), [&](Value k) {
    Value q = kb.div(k, kb.idx(granules)), g = kb.rem(k, kb.idx(granules));
    Value element = kb.add(kb.mul(q, kb.idx(p.stagedWidth)), kb.mul(g, kb.idx(G)));
    Value col = kb.indexToI32(kb.mul(kb.add(granule, g), kb.idx(G)));
    Value mapRow = kb.add(row, kb.indexToI32(q));
    for (int64_t r = 1; r < p.phases; ++r)
      kb.tensorLoad2d(boxAt(r, element), l.arg(phaseEdgeMap(p, r)), col, mapRow, bar);
  });
}

/// An unpacker (thread u of kUnpackers): step j's rows R .. 15 from its
/// staging slot into stage st, in 16-byte chunks (zeros past M: a map with
/// no token maps token 0), read back in pieces of the rows' alignment past
/// the map's shift; then the stage has its arrival and the slot is free.
void WideMain::unpackStep(Value u, Value j, Value st) {
  const int64_t R = p.phaseRows, items = p.boxes * (kRows - R) * 8;
  Value slot = kb.rem(j, kb.idx(p.slots));
  kb.mbarrierWait(slotBar(slot, false),
                  kb.indexToI32(kb.rem(kb.div(j, kb.idx(p.slots)), kb.idx(2))));
  Value staged = slotAt(slot), stage = stageAt(st), m0 = kb.mul(j, kb.idx(kRows));
  for (int64_t k = 0; k < (items + kUnpackers - 1) / kUnpackers; ++k) {
    Value item = kb.add(u, kb.idx(kUnpackers * k));
    auto body = [&] {
      WidePiece pc = rowPiece(item, R, kRows - R, 16, 0);
      Value r = kb.div(pc.row, kb.idx(R)), q = kb.rem(pc.row, kb.idx(R));
      Value shift = kb.rem(kb.mul(r, kb.idx(p.K % 8)), kb.idx(8));
      Value box = kb.mul(kb.sub(r, kb.idx(1)), kb.idx(p.stagedBoxBytes)); // map r's
      Value live = kb.lt(kb.add(m0, stepToken(kb, p, pc.row)), l.tokens());
      Value rowAt = kb.add(box, kb.mul(kb.add(kb.mul(q, kb.idx(p.stagedWidth)),
                                               kb.add(pc.col, shift)), kb.idx(2)));
      SmallVector<Value> words;
      for (int64_t e = 0; e < 8; e += p.piece / 2) {
        Value byte = kb.add(rowAt, kb.idx(2 * e));
        Value v = kb.vload(smem, kb.add(staged, kb.div(byte, kb.idx(4))), p.piece / 4);
        for (int64_t w = 0; w < p.piece / 4; ++w)
          words.push_back(kb.select(live, kb.extract(v, w), kb.f32(0.0)));
      }
      kb.vstore(kb.vector(words), smem, kb.add(stage, kb.div(pc.byte, kb.idx(4))));
    };
    if ((k + 1) * kUnpackers <= items)
      body();
    else
      kb.when(kb.lt(item, kb.idx(items)), body);
  }
  kb.fenceProxyAsyncShared(); // the consumers' wgmma, the next TMA writes
  kb.mbarrierArrive(ring.full(st));
  kb.mbarrierArrive(slotBar(slot, true));
}

/// The producer warpgroup at unaligned rows: thread 0 paces and issues
/// every step as at aligned rows (phase map 0's boxes and gh's image into
/// its stage) plus the other maps' boxes into a staging slot; warps 1 .. 3
/// copy each step out of its slot into its stage.
void WideMain::producePhases() {
  Value steps = kb.mul(pairsOf(l.tokens()), kb.idx(2));
  // The steps before the one that holds token M - 1 (M >= 1).
  Value inside = kb.div(kb.sub(kb.max(l.tokens(), kb.idx(1)), kb.idx(1)), kb.idx(kRows));
  kb.when(kb.eq(tid, kb.idx(0)), [&] {
    WavePacer pacer = makePacer();
    auto issue = [&](Value from, Value to, bool edge) {
      kb.loop(from, to, kb.idx(1), [&](Value i) {
        pacer.before(i);
        ring.produce(i, [&](Value st) {
          issueStep(i, st);
          issueStaged(i, edge);
        });
        pacer.after(i);
      });
    };
    issue(kb.idx(0), inside, false);
    issue(inside, steps, true);
    pacer.finish(steps, steps);
  });
  kb.when(kb.lt(kb.idx(31), tid), [&] {
    Value u = kb.sub(tid, kb.idx(32));
    kb.loop(kb.idx(0), steps, kb.idx(1), [&](Value j) {
      ring.produce(j, [&](Value st) { unpackStep(u, j, st); });
    });
  });
}
