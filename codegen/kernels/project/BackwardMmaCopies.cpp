//===- BackwardMmaCopies.cpp - the mma.sync backward's rings --------------===//
//
// How x, gh and gms reach a step's stage (BackwardMma.cpp describes the
// rings): a warp's own ring filled by cp.async, a step at a time, or the
// block ring filled by bulk copies from one thread, the paced producer
// warp's lane 0 where the blocks of a wave are held together.
//
//===----------------------------------------------------------------------===//

#include "builder/WavePacer.h"
#include "kernels/project/BackwardMmaMain.h"

#include "mlir/Dialect/Arith/IR/Arith.h"

using namespace mlir;
using namespace mlir::mhc;

Value MmaMain::stageBase(Value step) {
  Value stage = arith::AndIOp::create(kb.b, kb.loc, step, kb.idx(p.depth - 1));
  return kb.add(warpRing, kb.mul(stage, kb.idx(p.stageFloats)));
}

Value MmaMain::xSlot(Value base, int64_t u, int64_t c) {
  return kb.add(base, kb.add(kb.idx((u * p.copies + c) * 32 * p.unit / 4),
                             kb.mul(lane, kb.idx(p.unit / 4))));
}

/// i32 byte count of a 16-byte piece of a [.., 4k floats] buffer that
/// starts at float `src` of `end` floats: 16, the rest, or 0.
Value MmaMain::pieceBytes(Value src, Value end) {
  Value left = kb.sub(kb.max(end, src), src);
  Value bytes = kb.mul(kb.min(left, kb.idx(4)), kb.idx(4));
  return kb.indexToI32(bytes);
}

/// Issues the copies of `step` into its warp's stage (no commit), for any
/// step: every source clamped, bytes past M zero-filled.
void MmaMain::issuePartialStep(Value step) {
  const int64_t N = p.N, K = p.K, unit = p.unit, ghPieces = p.ghPieces;
  Value base = stageBase(step);
  Value m0 = kb.mul(step, kb.idx(8));
  if (p.rowWords)
    copyRowWords(base, m0, /*partial=*/true);
  for (int u = 0; u < 2 && !p.rowWords; ++u) {
    Value tok = kb.add(m0, kb.add(kb.mul(t, kb.idx(2)), kb.idx(u)));
    Value ok = kb.andi(active, kb.lt(tok, M));
    Value bytes = kb.select(ok, kb.i32(unit), kb.i32(0));
    Value off = kb.add(kb.mul(kb.min(tok, lastRow), kb.idx(K)), col0);
    if (p.wordCopy) {
      copyXWords(base, u, off, kb.min(tok, lastRow), ok);
      continue;
    }
    for (int64_t c = 0; c < p.copies; ++c) {
      Value xOff = kb.add(off, kb.idx(c * unit / p.actBytes));
      if (masked())
        copyX(xSlotPtr(base, u, c), xOff,
              kb.andi(kb.lt(tok, M), colsIn(c * unit / p.actBytes)));
      else
        kb.copyAsync(kb.sharedPtr(ring, xSlot(base, u, c)),
                     kb.globalPtr(l.arg("x"), xOff), unit, bytes);
    }
  }
  Value ghBase = kb.add(base, kb.idx(p.xFloats));
  for (int64_t i = 0; i < (ghPieces + 31) / 32; ++i) {
    Value piece = kb.add(lane, kb.idx(32 * i));
    auto copy = [&] {
      Value src = kb.add(kb.mul(m0, kb.idx(N)), kb.mul(piece, kb.idx(4)));
      Value bytes = pieceBytes(src, ghEnd);
      kb.copyAsync(kb.sharedPtr(ring, kb.add(ghBase, kb.mul(piece, kb.idx(4)))),
                   kb.globalPtr(l.arg("gh"), kb.select(kb.lt(src, ghEnd), src, kb.idx(0))),
                   16, bytes);
    };
    if (32 * i + 32 <= ghPieces)
      copy();
    else
      kb.when(kb.lt(piece, kb.idx(ghPieces)), copy);
  }
  kb.when(kb.lt(lane, kb.idx(2)), [&] {
    Value src = kb.add(m0, kb.mul(lane, kb.idx(4)));
    kb.copyAsync(kb.sharedPtr(ring, kb.add(ghBase, kb.add(kb.idx(p.ghFloats), kb.mul(lane, kb.idx(4))))),
                 kb.globalPtr(l.arg("gms"), kb.select(kb.lt(src, M), src, kb.idx(0))),
                 16, pieceBytes(src, M));
  });
}

/// The same for a step of 8 tokens below M (all but the last): the lane's
/// sources are fixed offsets from the step's first token, and whole pieces
/// are copied (columns past K only when K % blockCols).
void MmaMain::issueFullStep(Value step) {
  const int64_t N = p.N, K = p.K, unit = p.unit, ghPieces = p.ghPieces;
  Value base = stageBase(step);
  Value m0 = kb.mul(step, kb.idx(8));
  Value off = kb.add(kb.mul(m0, kb.idx(K)), xLane);
  if (p.rowWords)
    copyRowWords(base, m0, /*partial=*/false);
  for (int u = 0; u < 2 && !p.rowWords; ++u) {
    if (p.wordCopy) {
      copyXWords(base, u, kb.add(off, kb.idx(u * K)),
                 kb.add(m0, kb.add(kb.mul(t, kb.idx(2)), kb.idx(u))), active);
      continue;
    }
    for (int64_t c = 0; c < p.copies; ++c) {
      Value xOff = kb.add(off, kb.idx(u * K + c * unit / p.actBytes));
      if (masked())
        copyX(xSlotPtr(base, u, c), xOff, colsIn(c * unit / p.actBytes));
      else
        kb.copyAsync(kb.sharedPtr(ring, xSlot(base, u, c)),
                     kb.globalPtr(l.arg("x"), xOff), unit, xBytes);
    }
  }
  Value ghBase = kb.add(base, kb.idx(p.xFloats));
  Value ghSrc = kb.add(kb.mul(m0, kb.idx(N)), kb.mul(lane, kb.idx(4)));
  Value ghDst = kb.add(ghBase, kb.mul(lane, kb.idx(4)));
  for (int64_t i = 0; i < (ghPieces + 31) / 32; ++i) {
    auto copy = [&] {
      kb.copyAsync(kb.sharedPtr(ring, kb.add(ghDst, kb.idx(128 * i))),
                   kb.globalPtr(l.arg("gh"), kb.add(ghSrc, kb.idx(128 * i))), 16);
    };
    if (32 * i + 32 <= ghPieces)
      copy();
    else
      kb.when(kb.lt(lane, kb.idx(ghPieces - 32 * i)), copy);
  }
  kb.when(kb.lt(lane, kb.idx(2)), [&] {
    kb.copyAsync(kb.sharedPtr(ring, kb.add(ghDst, kb.idx(p.ghFloats))),
                 kb.globalPtr(l.arg("gms"), kb.add(m0, kb.mul(lane, kb.idx(4)))), 16);
  });
}

void MmaMain::issueStep(Value step) {
  Value full = kb.lt(kb.add(kb.mul(step, kb.idx(8)), kb.idx(7)), M);
  Value notFull = arith::XOrIOp::create(kb.b, kb.loc, full, kb.boolean(true));
  kb.when(full, [&] { issueFullStep(step); });
  kb.when(notFull, [&] { issuePartialStep(step); });
}

/// The block ring's producer (thread 0, or the paced producer warp's lane
/// 0): the copies of step sBegin + i into stage st. Rows past M repeat row
/// M - 1 (their gh rows are zero, so they add nothing); gh's rows past M
/// are not copied but zeroed.
void MmaMain::issueBlockStep(Value i, Value st) {
  const int64_t N = p.N, K = p.K, ghStride = p.ghStride;
  Value base = kb.mul(st, kb.idx(p.stageFloats));
  Value m0 = kb.mul(kb.add(sBegin, i), kb.idx(8));
  Value rows = kb.min(kb.sub(M, m0), kb.idx(8));
  Value ghBase = kb.add(base, kb.idx(p.xFloats));
  kb.loop(kb.mul(rows, kb.idx(ghStride)), kb.idx(p.ghFloats), kb.idx(1), [&](Value e) {
    kb.store(zero, ring, kb.add(ghBase, e));
  });
  Value ghBytes = kb.mul(rows, kb.idx(N * 4));
  Value bar = bulk->full(st);
  // Rows 8-byte aligned (xAlign 8): each row's copy starts at the 16-byte
  // boundary below it and ends at the one above (the 16-byte granules that
  // hold its bytes), rowShift bytes ahead of the row in its slot.
  auto rowOf = [&](int64_t r) { return kb.min(kb.add(m0, kb.idx(r)), lastRow); };
  auto copyBytes = [&](Value row) {
    if (p.xAlign == 16)
      return xRowBytes;
    Value end = kb.add(kb.add(xRowBytes, rowShift(row)), kb.idx(15));
    return kb.mul(kb.div(end, kb.idx(16)), kb.idx(16));
  };
  Value xBytes = kb.mul(xRowBytes, kb.idx(8));
  if (p.xAlign < 16)
    for (int64_t r = 0; r < 8; ++r)
      xBytes = r == 0 ? copyBytes(rowOf(r)) : kb.add(xBytes, copyBytes(rowOf(r)));
  kb.mbarrierArriveExpectTx(bar, kb.indexToI32(kb.add(xBytes, ghBytes)));
  for (int64_t r = 0; r < 8; ++r) {
    Value row = rowOf(r);
    Value start = kb.add(kb.mul(row, kb.idx(K)), sliceCol);
    if (p.xAlign < 16)
      start = kb.sub(start, kb.div(rowShift(row), kb.idx(p.actBytes)));
    kb.bulkCopy(kb.sharedPtr(ring, kb.add(base, kb.idx(r * p.rowBytes / 4))),
                kb.globalPtr(l.arg("x"), start), kb.indexToI32(copyBytes(row)), bar);
  }
  if (ghStride == N)
    kb.bulkCopy(kb.sharedPtr(ring, ghBase),
                kb.globalPtr(l.arg("gh"), kb.mul(m0, kb.idx(N))), kb.indexToI32(ghBytes), bar);
  else
    for (int64_t r = 0; r < 8; ++r)
      kb.when(kb.lt(kb.idx(r), rows), [&] {
        kb.bulkCopy(kb.sharedPtr(ring, kb.add(ghBase, kb.idx(r * ghStride))),
                    kb.globalPtr(l.arg("gh"), kb.mul(kb.add(m0, kb.idx(r)), kb.idx(N))),
                    kb.i32(N * 4), bar);
      });
}

/// The first depth - 1 steps go in flight (a group per warp, or bulk
/// copies by thread 0 after the mbarriers are set up).
void MmaMain::startCopies() {
  if (p.staged && !p.paced) {
    bulk->start(count, [&](Value i, Value st) { issueBlockStep(i, st); });
  } else if (!p.staged) {
    for (int64_t d = 0; d + 1 < p.depth; ++d) {
      Value step = kb.add(sBegin, kb.idx(d));
      kb.when(kb.lt(step, sEnd), [&] { issueStep(step); });
      kb.copyAsyncCommit();
    }
  }
}

/// Producer: lane 0 of warp `warps` fills the ring, so that no consumer
/// waits while it paces (WavePacer): the blocks of a wave (smCount() *
/// blocksPerSM consecutive block ids) in epochs of kEpoch steps, on
/// counters that launch "zero" clears; pacing keeps a wave's blocks
/// reading nearby x (docs/design/project.md).
void MmaMain::produce() {
  kb.when(kb.eq(tid, kb.idx(32 * p.warps)), [&] {
    const int64_t waveBlocks = p.waveBlocks;
    Value wave = kb.div(bid, kb.idx(waveBlocks));
    Value peers = kb.min(kb.idx(waveBlocks),
                         kb.sub(kb.idx(p.slices * p.shares), kb.mul(wave, kb.idx(waveBlocks))));
    Value counter = kb.globalPtr(l.arg("progress"), wave);
    Value flag = kb.sharedPtr(l.shared(2), kb.idx(2 * p.depth));
    Value pace = arith::XOrIOp::create(kb.b, kb.loc, kb.lt(M, kb.idx(p.paceTokens)),
                                       kb.boolean(true));
    WavePacer pacer(kb, counter, flag, peers, kEpoch, kPaceLag, pace);
    kb.loop(kb.idx(0), count, kb.idx(1), [&](Value i) {
      pacer.before(i);
      bulk->produce(i, [&](Value st) { issueBlockStep(i, st); });
      pacer.after(i);
    });
    pacer.finish(per, count);
  });
}
