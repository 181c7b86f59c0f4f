//===- BackwardMma.cpp - projection backward on mma.sync, every n ---------===//
//
// One fused pass over x on tensor cores. A block of four warps owns
// 4 x 16T columns of K and a fixed share of the tokens; a warp walks its
// share 8 tokens at a time and computes, per 16-column k-tile,
//   D^T = phi^T gh^T   (16 k x 8 tokens; contraction over N), and
//   gphi^T += x^T gh   (16 k x 8 rows of N; contraction over the 8 tokens).
// D^T's accumulator layout (lane (g, t): rows g, g + 8, tokens 2t, 2t + 1)
// is exactly the A-fragment layout of x^T once the step's tokens are
// permuted (logical t, t + 4 -> physical 2t, 2t + 1), so each lane loads x
// once, as 2T contiguous columns per token (rows g and g + 8 of tile kt are
// columns 2kt and 2kt + 1 of the lane's run), and uses the same values for
// gx = D w + (2/K) gms x, gw += x D and gphi's mma. phi^T's fragments are
// constant and wait in lane-private shared memory. x and gh arrive through
// a ring of stages in shared memory, several steps ahead: for 2-byte x on
// sm_90 a block ring filled by bulk copies (one thread, mbarriers; on sm_90a
// without a weight a producer warp's, which holds the blocks of a wave
// together), else a ring per warp filled by cp.async; the block ring spares
// the L2 every warp asking for the same gh rows (docs/design/project.md).
// Without the tf32 flag, gh and phi are split into tf32 hi + lo parts
// (3xTF32) and gphi's mma accumulators are flushed into fp32 totals every
// 64 tokens. Per-share partials [shares, N*K + K] are summed in order by a
// second launch: deterministic, no atomics.
//
// The layer seam's main pass (foldAggregate: docs/design/seam.md, "The
// fused backward") also folds aggregate's gradient into acc: before it
// stores gx the lane loads gy at its channels and pre at its tokens and
// forms aggregate's gx, acc + pre (x) gy rounded as aggregate.bwd stores
// it, which the unfused chain reads back as acc; (C, n) layout with whole
// channels per lane (BackwardMmaFold.cpp). The class is declared in
// BackwardMmaMain.h; x's rows at K % 8 != 0 are BackwardMmaAnyK.cpp's.
//
//===----------------------------------------------------------------------===//

#include "builder/BulkRing.h"
#include "builder/WavePacer.h"
#include "builder/Streams.h"
#include "kernels/project/Fragments.h"
#include "kernels/project/BackwardMmaMain.h"
#include "kernels/project/BackwardMmaPlan.h"
#include "kernels/project/Project.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include <optional>

using namespace mlir;
using namespace mlir::mhc;
using ::mhc::BufferRole;
using ::mhc::DType;

MmaMain::MmaMain(KernelContext &ctx, const MmaPlan &p, LaunchBuilder &l,
                 bool foldAggregate)
    : p(p), l(l), kb(ctx.begin(l)), act(ctx.spec.act), spec(ctx.spec),
      hasAcc(ctx.spec.readsAcc()), foldAgg(foldAggregate), n(ctx.n()) {
  const int64_t N = p.N, K = p.K;
  M = l.tokens();
  tid = kb.threadId(), bid = kb.blockId();
  lane = kb.rem(tid, kb.idx(32)), warp = kb.div(tid, kb.idx(32));
  g = kb.div(lane, kb.idx(4)), t = kb.rem(lane, kb.idx(4));
  slice = kb.rem(bid, kb.idx(p.slices)), share = kb.div(bid, kb.idx(p.slices));
  // This lane's run of 2T physical columns; logical row g + 8h of k-tile
  // kt is column colBase + 2kt + h.
  colBase = kb.add(kb.mul(slice, kb.idx(p.blockCols)),
                   kb.add(kb.mul(warp, kb.idx(16 * p.T)),
                          kb.mul(g, kb.idx(p.laneCols))));
  active = kb.lt(colBase, kb.idx(K));
  col0 = kb.select(active, colBase, kb.idx(0));
  zero = kb.f32(0.0);
  smem = l.shared(0), ring = l.shared(1);
  twoOverK = kb.f32(2.0 / static_cast<double>(K));

  // This share's steps of 8 tokens.
  Value steps = kb.div(kb.add(M, kb.idx(7)), kb.idx(8));
  per = kb.div(kb.add(steps, kb.idx(p.shares - 1)), kb.idx(p.shares));
  sBegin = kb.min(kb.mul(share, per), steps);
  sEnd = kb.min(kb.add(sBegin, per), steps);
  lastRow = kb.sub(M, kb.idx(1));

  zeroAcc = arith::ConstantOp::create(
      kb.b, kb.loc,
      DenseElementsAttr::get(VectorType::get({2, 2}, kb.b.getF32Type()), 0.0f));
  init.assign(p.nAcc(), zeroAcc);
  init.append(p.laneCols, zero);

  warpRing = kb.mul(warp, kb.idx(p.depth * p.stageFloats));
  ghEnd = kb.mul(M, kb.idx(N));
  xLane = kb.add(kb.mul(kb.mul(t, kb.idx(2)), kb.idx(K)), col0);
  xBytes = K % p.blockCols == 0 ? Value()
                                : kb.select(active, kb.i32(p.unit), kb.i32(0));
  actVec = VectorType::get({p.unit / p.actBytes},
                           elementType(kb.b.getContext(), ctx.spec.act));
  if (p.staged)
    bulk.emplace(kb, l.shared(2), p.depth, p.warps, /*everyLane=*/true);
  count = kb.sub(sEnd, sBegin);
  // Bytes of this block's slice of a row (the last slice may be narrower).
  sliceCol = kb.mul(slice, kb.idx(p.blockCols));
  xRowBytes = kb.mul(kb.min(kb.sub(kb.idx(K), sliceCol), kb.idx(p.blockCols)),
                     kb.idx(p.actBytes));
  // This lane's x columns within the block's slice.
  laneColInBlock = kb.sub(colBase, sliceCol);
  limitRowAccesses(ctx, kb, l, {"x", "phi", "weight", "acc", "gx", "partials"});
}

Value MmaMain::slot(int64_t kt, int64_t rs, int64_t part) {
  Value s = kb.add(kb.mul(warp, kb.idx(p.T * p.rSteps * p.parts)),
                   kb.idx((kt * p.rSteps + rs) * p.parts + part));
  return kb.add(kb.mul(s, kb.idx(128)), kb.mul(lane, kb.idx(4)));
}

/// phi^T's A fragments (rows 8rs + t and 8rs + t + 4 at this lane's
/// columns), tf32-rounded or split, parked in lane-private shared memory
/// slots: they are reused every step but would cost T*rSteps*4 registers.
void MmaMain::parkPhi() {
  const int64_t N = p.N, K = p.K;
  for (int64_t rs = 0; rs < p.rSteps; ++rs) {
    std::array<SmallVector<Value>, 2> rowVals;
    for (int h = 0; h < 2; ++h) {
      Value r = kb.add(kb.idx(8 * rs + 4 * h), t);
      Value ok = kb.andi(active, kb.lt(r, kb.idx(N)));
      auto at = [&](Value c) { return kb.add(kb.mul(kb.min(r, kb.idx(N - 1)), kb.idx(K)), c); };
      for (Value v : loadLaneCols(l.arg("phi"), at))
        rowVals[h].push_back(kb.select(ok, v, zero));
    }
    for (int64_t kt = 0; kt < p.T; ++kt) {
      SmallVector<Value> a = {rowVals[0][2 * kt], rowVals[0][2 * kt + 1],
                              rowVals[1][2 * kt], rowVals[1][2 * kt + 1]};
      auto [hi, lo] = tf32Parts(kb, a, p.precise);
      for (int64_t i = 0; i < 4; ++i) {
        kb.store(hi[i], smem, kb.add(slot(kt, rs, 0), kb.idx(i)));
        if (p.precise)
          kb.store(lo[i], smem, kb.add(slot(kt, rs, 1), kb.idx(i)));
      }
    }
  }
}

/// (Scalar accesses: the backend merges them into ld.shared.v4.)
Value MmaMain::aFragment(int64_t kt, int64_t rs, int64_t part) {
  Value base = slot(kt, rs, part);
  SmallVector<Value> v;
  for (int64_t i = 0; i < 4; ++i)
    v.push_back(kb.load(smem, kb.add(base, kb.idx(i))));
  return fragment(kb, v);
}

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
  for (int u = 0; u < 2; ++u) {
    Value tok = kb.add(m0, kb.add(kb.mul(t, kb.idx(2)), kb.idx(u)));
    Value ok = kb.andi(active, kb.lt(tok, M));
    Value bytes = kb.select(ok, kb.i32(unit), kb.i32(0));
    Value off = kb.add(kb.mul(kb.min(tok, lastRow), kb.idx(K)), col0);
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
  for (int u = 0; u < 2; ++u)
    for (int64_t c = 0; c < p.copies; ++c) {
      Value xOff = kb.add(off, kb.idx(u * K + c * unit / p.actBytes));
      if (masked())
        copyX(xSlotPtr(base, u, c), xOff, colsIn(c * unit / p.actBytes));
      else
        kb.copyAsync(kb.sharedPtr(ring, xSlot(base, u, c)),
                     kb.globalPtr(l.arg("x"), xOff), unit, xBytes);
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

/// gh[m0 + tokLocal][8rs + i] in the stage; rows past N are zero. (Row
/// stride ghStride: at most 2-way bank conflicts.)
Value MmaMain::ghAt(Value ghBase, Value tokLocal, int64_t rs, Value i) {
  Value r = kb.add(kb.idx(8 * rs), i);
  Value v = kb.load(ring, kb.add(ghBase, kb.add(kb.mul(tokLocal, kb.idx(p.ghStride)), r)));
  return 8 * rs + 8 <= p.N ? v : kb.select(kb.lt(r, kb.idx(p.N)), v, zero);
}

/// A step's products from the stage: D^T (returned, per k-tile) and gphi's
/// accumulators `acc`, from x's values xa[u] of tokens 2t + u.
SmallVector<Value> MmaMain::stepProducts(Value ghBase, ArrayRef<SmallVector<Value>> xa,
                                         SmallVector<Value> &acc) {
  const int64_t T = p.T, rSteps = p.rSteps;
  const bool precise = p.precise, splitX = p.splitX;
  // x's A fragments per k-tile (exact in tf32 for bf16/f16).
  SmallVector<Value> ax, axLo;
  for (int64_t kt = 0; kt < T; ++kt) {
    SmallVector<Value> a = {xa[0][2 * kt], xa[0][2 * kt + 1],
                            xa[1][2 * kt], xa[1][2 * kt + 1]};
    if (splitX || p.roundX) {
      auto [hi, lo] = tf32Parts(kb, a, splitX);
      a = hi;
      if (splitX)
        axLo.push_back(fragment(kb, lo));
    }
    ax.push_back(fragment(kb, a));
  }
  SmallVector<Value> d(T, zeroAcc);
  for (int64_t rs = 0; rs < rSteps; ++rs) {
    // D^T += phi^T gh^T: B = gh[m0 + g][8rs + t (+4)].
    Value bd0 = ghAt(ghBase, g, rs, t);
    Value bd1 = ghAt(ghBase, g, rs, kb.add(t, kb.idx(4)));
    // gphi^T += x^T gh with the step's tokens permuted (logical t and
    // t + 4 are physical 2t and 2t + 1): B = gh[m0 + 2t + u][8rs + g].
    Value bg0 = ghAt(ghBase, kb.mul(t, kb.idx(2)), rs, g);
    Value bg1 = ghAt(ghBase, kb.add(kb.mul(t, kb.idx(2)), kb.idx(1)), rs, g);
    auto [bdH, bdL] = tf32Parts(kb, {bd0, bd1}, precise);
    auto [bgH, bgL] = tf32Parts(kb, {bg0, bg1}, precise);
    Value bdHi = fragment(kb, bdH), bgHi = fragment(kb, bgH);
    Value bdLo = precise ? fragment(kb, bdL) : Value();
    Value bgLo = precise ? fragment(kb, bgL) : Value();
    for (int64_t kt = 0; kt < T; ++kt) {
      Value aHi = aFragment(kt, rs, 0);
      d[kt] = mma(kb, aHi, bdHi, d[kt]);
      if (precise) {
        d[kt] = mma(kb, aFragment(kt, rs, 1), bdHi, d[kt]);
        d[kt] = mma(kb, aHi, bdLo, d[kt]);
      }
      Value &gp = acc[kt * rSteps + rs];
      gp = mma(kb, ax[kt], bgHi, gp);
      if (precise)
        gp = mma(kb, ax[kt], bgLo, gp);
      if (splitX)
        gp = mma(kb, axLo[kt], bgHi, gp);
    }
  }
  return d;
}

/// Waits for `s.step`'s stage and reads its x: the stage's base, the
/// tokens 2t + u (x, gx, gphi's B) and their values, gms scaled by 2/K.
void MmaMain::enterStep(StepValues &s) {
  const int64_t actBytes = p.actBytes, rowBytes = p.rowBytes;
  std::array<Value, 2> gmsRaw;
  if (p.staged) {
    // gms straight from global memory (two values per lane, in L1).
    for (int u = 0; u < 2; ++u)
      gmsRaw[u] = kb.load(l.arg("gms"),
                          kb.min(kb.add(s.m0, kb.add(kb.mul(t, kb.idx(2)), kb.idx(u))), lastRow));
    s.i = kb.sub(s.step, sBegin);
    s.base = kb.mul(p.paced ? bulk->wait(s.i)
                            : bulk->acquire(s.i, count, [&](Value i, Value st) {
                                issueBlockStep(i, st);
                              }),
                    kb.idx(p.stageFloats));
  } else {
    // Step + depth - 1 goes in flight, then this step's copies (the
    // oldest group but depth - 1) are waited for.
    Value ahead = kb.add(s.step, kb.idx(p.depth - 1));
    kb.when(kb.lt(ahead, sEnd), [&] { issueStep(ahead); });
    kb.copyAsyncCommit();
    kb.copyAsyncWait(p.depth - 1);
    kb.syncWarp();
    s.base = stageBase(s.step);
  }
  for (int u = 0; u < 2; ++u) {
    s.tok[u] = kb.add(s.m0, kb.add(kb.mul(t, kb.idx(2)), kb.idx(u)));
    s.tokOk[u] = kb.lt(s.tok[u], M);
    for (int64_t c = 0; c < p.copies; ++c) {
      Value inRow = kb.add(kb.mul(t, kb.idx(2 * rowBytes)), kb.mul(laneColInBlock, kb.idx(actBytes)));
      if (p.staged && p.xAlign < 16)
        inRow = kb.add(inRow, rowShift(kb.min(s.tok[u], lastRow)));
      Value src = p.staged ? kb.sharedPtr(ring, kb.add(s.base, kb.div(kb.add(kb.idx(u * rowBytes + c * p.unit),
                                                                             inRow),
                                                                      kb.idx(4))))
                           : xSlotPtr(s.base, u, c);
      Value raw = LLVM::LoadOp::create(kb.b, kb.loc, actVec, src, p.unit);
      Value v = kb.toF32(raw);
      for (int64_t i = 0; i < p.unit / actBytes; ++i)
        s.xa[u].push_back(kb.extract(v, i));
    }
  }
  s.ghBase = kb.add(s.base, kb.idx(p.xFloats));
  for (int u = 0; u < 2; ++u)
    s.gms[u] = kb.mul(p.staged ? gmsRaw[u]
                               : kb.load(ring, kb.add(s.ghBase, kb.add(kb.idx(p.ghFloats + u),
                                                                       kb.mul(t, kb.idx(2))))),
                      twoOverK);
}

/// acc at the step's tokens 2t + u and this lane's columns, before the
/// products (which then hide the loads' latency); rows past M read row
/// M - 1 and are not stored.
void MmaMain::loadAcc(StepValues &s) {
  for (int u = 0; u < 2; ++u)
    s.acc[u] = loadLaneCols(l.arg("acc"), [&](Value c) {
      return kb.add(kb.mul(kb.min(s.tok[u], lastRow), kb.idx(p.K)), c);
    });
}

/// D[m0 + 2t + u][column 2kt + h] is d[kt][h][u]: gx (plus acc) to global
/// memory, and gw's sums in `sums`.
void MmaMain::storeGx(StepValues &s, ArrayRef<Value> d, SmallVector<Value> &sums) {
  const int64_t nAcc = p.nAcc();
  if (foldAgg)
    foldAggregateInto(s);
  std::array<SmallVector<Value>, 2> gx;
  for (int u = 0; u < 2; ++u)
    for (int64_t j = 0; j < p.laneCols; ++j) {
      Value dv = vector::ExtractOp::create(
          kb.b, kb.loc, d[j / 2], ArrayRef<int64_t>{j % 2, u});
      // (Without a weight, D w is D: one fma.)
      Value own = p.hasW ? kb.fma(dv, w[j], kb.mul(s.gms[u], s.xa[u][j]))
                         : kb.fma(s.gms[u], s.xa[u][j], dv);
      gx[u].push_back(hasAcc || foldAgg ? plusAcc(kb, spec, own, s.acc[u][j]) : own);
      sums[nAcc + j] = kb.fma(s.xa[u][j], dv, sums[nAcc + j]);
    }
  for (int u = 0; u < 2; ++u)
    kb.when(kb.andi(active, s.tokOk[u]), [&] {
      storeLaneCols(gx[u], l.arg("gx"), [&](Value c) {
        return kb.add(kb.mul(s.tok[u], kb.idx(p.K)), c);
      });
    });
}

/// One step of 8 tokens: its stage, the products, the stage released, gx.
void MmaMain::stepBody(Value step, SmallVector<Value> &sums) {
  StepValues s;
  s.step = step;
  s.m0 = kb.mul(step, kb.idx(8));
  enterStep(s);
  if (hasAcc && !lateAcc())
    loadAcc(s);
  SmallVector<Value> d = stepProducts(s.ghBase, s.xa, sums);
  // Every lane is done with the stage before it is refilled.
  if (p.staged)
    bulk->release(s.i, lane);
  else
    kb.syncWarp();
  storeGx(s, d, sums);
}

SmallVector<Value> MmaMain::stepRange(Value lb, Value ub, ValueRange start) {
  return kb.loop(lb, ub, kb.idx(1), start, [&](Value step, ValueRange it) {
    SmallVector<Value> sums(it.begin(), it.end());
    stepBody(step, sums);
    return sums;
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

/// The share's sums over its steps. Precise mode sums in two levels: runs
/// of kRun steps, then the runs; gphi's mma accumulators restart every run
/// and are added into fp32 totals, so the tensor core's truncating
/// accumulation never spans more than 64 tokens. With tf32 (bound 2e-3)
/// one level is enough.
SmallVector<Value> MmaMain::shareSums() {
  if (!p.precise)
    return stepRange(sBegin, sEnd, init);
  int64_t nSums = p.nAcc() + p.laneCols;
  return kb.loop(
      sBegin, sEnd, kb.idx(kRun), init, [&](Value s0, ValueRange outer) {
        SmallVector<Value> start(init.begin(), init.end());
        SmallVector<Value> sums =
            stepRange(s0, kb.min(kb.add(s0, kb.idx(kRun)), sEnd), start);
        for (int64_t i = 0; i < nSums; ++i)
          sums[i] = kb.add(outer[i], sums[i]);
        return sums;
      });
}

/// The share's partials: gphi (times the weight) and gw, whose four lanes
/// of a column group hold different tokens.
void MmaMain::storeShare(ArrayRef<Value> total) {
  const int64_t N = p.N, K = p.K, rSteps = p.rSteps, nAcc = p.nAcc();
  SmallVector<Value> gw;
  for (int64_t j = 0; j < p.laneCols; ++j) {
    Value v = total[nAcc + j];
    for (int offset : {1, 2}) {
      auto sh = gpu::ShuffleOp::create(kb.b, kb.loc, v, offset, 32,
                                       gpu::ShuffleMode::XOR);
      v = kb.add(v, sh.getShuffleResult());
    }
    gw.push_back(v);
  }
  kb.when(active, [&] {
    Value base = kb.mul(share, kb.idx(p.width));
    // gphi[8rs + 2t + e][colBase + 2kt + h] = acc[kt][rs][h][e] * w.
    for (int64_t rs = 0; rs < rSteps; ++rs)
      for (int64_t e = 0; e < 2; ++e) {
        Value r = kb.add(kb.idx(8 * rs + e), kb.mul(t, kb.idx(2)));
        SmallVector<Value> vals;
        for (int64_t j = 0; j < p.laneCols; ++j)
          vals.push_back(kb.mul(
              w[j], vector::ExtractOp::create(
                        kb.b, kb.loc, total[(j / 2) * rSteps + rs],
                        ArrayRef<int64_t>{j % 2, e})));
        kb.when(kb.lt(r, kb.idx(N)), [&] {
          storeLaneCols(vals, l.arg("partials"), [&](Value c) {
            return kb.add(base, kb.add(kb.mul(r, kb.idx(K)), c));
          });
        });
      }
    if (p.hasW)
      kb.when(kb.eq(t, kb.idx(0)), [&] {
        storeLaneCols(gw, l.arg("partials"), [&](Value c) {
          return kb.add(base, kb.add(kb.idx(N * K), c));
        });
      });
  });
}

/// The consumers: every warp but the producer's.
void MmaMain::consume() {
  parkPhi();
  w.assign(p.laneCols, kb.f32(1.0));
  if (p.hasW)
    w = loadLaneCols(l.arg("weight"), [](Value c) { return c; });
  startCopies();
  SmallVector<Value> total = shareSums();
  // Groups of steps past the share's end were empty.
  if (!p.staged)
    kb.copyAsyncWait(0);
  storeShare(total);
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

void MmaMain::emit() {
  if (!p.paced) {
    consume();
    return;
  }
  bulk->init();
  produce();
  kb.when(kb.lt(warp, kb.idx(p.warps)), [&] { consume(); });
}

namespace {

/// Launch "zero" of paced specs: the producers' counters, skipped below
/// paceTokens (one launch fewer for a small call; the counters are then
/// left alone).
void buildZeroLaunch(KernelContext &ctx, const MmaPlan &p) {
  ctx.buffer("progress", DType::F32, BufferRole::Workspace, {0, p.waves});
  LaunchBuilder &l = ctx.launch("zero");
  ::mhc::GridRule grid{0, 1};
  grid.minTokens = p.paceTokens;
  l.param("progress").block(32).grid(grid);
  KernelBuilder kb = ctx.begin(l);
  WavePacer::clear(kb, l.arg("progress"), p.waves, 32);
}

void buildMainLaunch(KernelContext &ctx, const MmaPlan &p, bool foldAggregate) {
  LaunchBuilder &l = ctx.launch("main");
  l.param("gh").param("gms").param("x").param("phi");
  if (p.hasW)
    l.param("weight");
  if (ctx.spec.readsAcc())
    l.param("acc");
  if (foldAggregate)
    l.param("gy").param("pre");
  l.param("gx").param("partials");
  if (p.paced)
    l.param("progress");
  l.param("M").block(p.threads)
      .grid({0, p.slices * p.shares})
      .sharedF32(p.phiFloats)
      .sharedF32((p.staged ? 1 : p.warps) * p.depth * p.stageFloats, /*align=*/128)
      .minBlocksPerSM(p.blocksPerSM);
  if (p.staged) // the mbarriers (and the paced producer's flag)
    l.sharedI64(2 * p.depth + (p.paced ? 1 : 0));
  MmaMain(ctx, p, l, foldAggregate).emit();
}

} // namespace

LogicalResult mlir::mhc::buildProjectBackwardMma(KernelContext &ctx,
                                                 bool foldAggregate) {
  const MmaPlan p = planMma(ctx);
  declareProjectBackwardIO(ctx);
  if (foldAggregate) {
    ctx.buffer("gy", ctx.spec.act, BufferRole::Input, {ctx.C(), 0});
    ctx.buffer("pre", DType::F32, BufferRole::Input, {ctx.n(), 0});
  }
  ctx.buffer("partials", DType::F32, BufferRole::Workspace, {0, p.shares * p.width});
  if (p.paced)
    buildZeroLaunch(ctx, p);
  buildMainLaunch(ctx, p, foldAggregate);
  SmallVector<std::pair<std::string, int64_t>> dsts = {{"gphi", p.N * p.K}};
  if (p.hasW)
    dsts.push_back({"gweight", p.K});
  emitColumnSumFinal(ctx, "partials", p.width, dsts, p.shares);
  return success();
}
