//===- BackwardMmaStep.cpp - the mma.sync backward's steps ----------------===//
//
// A consumer warp's step of 8 tokens (BackwardMma.cpp describes the
// kernel): phi^T's fragments parked in shared memory once, then per step
// its stage's x and gh, D^T and gphi's products on mma.sync, and gx (plus
// acc) stored with gw's sums.
//
//===----------------------------------------------------------------------===//

#include "builder/Streams.h"
#include "kernels/project/BackwardMmaMain.h"
#include "kernels/project/Fragments.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;
using namespace mlir::mhc;

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
    if (p.rowWords) {
      s.xa[u] = readRowWords(s.base, u, kb.min(s.tok[u], lastRow));
      continue;
    }
    if (!p.staged && p.wordCopy) {
      s.xa[u] = readXWords(s.base, u, kb.min(s.tok[u], lastRow));
      continue;
    }
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
  if (p.gxGranules)
    return p.gxStaged() ? storeGxStaged(s, gx) : storeGxGranules(s, gx);
  if (p.wordCopy && !p.staged)
    return storeGxWords(s, gx);
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
