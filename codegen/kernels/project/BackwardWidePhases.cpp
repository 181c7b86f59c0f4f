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
/// i % slots, once the unpackers have copied step i - slots out of it.
void WideMain::issueStaged(Value i) {
  Value slot = kb.rem(i, kb.idx(p.slots)), bar = slotBar(slot, false), at = slotAt(slot);
  kb.when(kb.lt(kb.idx(p.slots - 1), i), [&] {
    Value use = kb.sub(kb.div(i, kb.idx(p.slots)), kb.idx(1));
    kb.mbarrierWait(slotBar(slot, true), kb.indexToI32(kb.rem(use, kb.idx(2))));
  });
  Value row = kb.indexToI32(kb.mul(i, kb.idx(p.phaseRows)));
  kb.mbarrierArriveExpectTx(bar, (p.phases - 1) * p.stagedBoxes * p.phaseRows *
                                     p.stagedWidth * 2);
  for (int64_t r = 1; r < p.phases; ++r)
    for (int64_t b = 0; b < p.stagedBoxes; ++b) {
      int64_t box = (r - 1) * p.stagedBoxes + b;
      kb.tensorLoad2d(kb.sharedPtr(smem, kb.add(at, kb.idx(box * p.stagedBoxBytes / 4))),
                      l.arg(phaseMap(p, r)),
                      kb.indexToI32(kb.add(colBase, kb.idx(b * p.stagedWidth))), row, bar);
    }
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
      Value first = kb.mul(kb.sub(r, kb.idx(1)), kb.idx(p.stagedBoxes)); // map r's boxes
      Value live = kb.lt(kb.add(m0, stepToken(kb, p, pc.row)), l.tokens());
      SmallVector<Value> words;
      for (int64_t e = 0; e < 8; e += p.piece / 2) {
        Value c = kb.add(kb.add(pc.col, shift), kb.idx(e));
        Value box = kb.add(first, kb.div(c, kb.idx(p.stagedWidth)));
        Value byte = kb.add(kb.mul(box, kb.idx(p.stagedBoxBytes)),
                            kb.mul(kb.add(kb.mul(q, kb.idx(p.stagedWidth)),
                                          kb.rem(c, kb.idx(p.stagedWidth))),
                                   kb.idx(2)));
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
  kb.when(kb.eq(tid, kb.idx(0)), [&] {
    WavePacer pacer = makePacer();
    kb.loop(kb.idx(0), steps, kb.idx(1), [&](Value i) {
      pacer.before(i);
      ring.produce(i, [&](Value st) {
        issueStep(i, st);
        issueStaged(i);
      });
      pacer.after(i);
    });
    pacer.finish(steps, steps);
  });
  kb.when(kb.lt(kb.idx(31), tid), [&] {
    Value u = kb.sub(tid, kb.idx(32));
    kb.loop(kb.idx(0), steps, kb.idx(1), [&](Value j) {
      ring.produce(j, [&](Value st) { unpackStep(u, j, st); });
    });
  });
}
