//===- BackwardWideConsumer.cpp - the one-wave backward's consumers -------===//
//
// Launch "main"'s warpgroups 1 and 2 (BackwardWideMain.cpp describes the
// launch): per pair of steps, D^T = phi^T gh^T and gphi^T += x^T gh by
// wgmma, gx written over the x boxes in place and stored by TMA; gphi^T
// stored at the end.
//
//===----------------------------------------------------------------------===//

#include "kernels/project/BackwardWide.h"

#include "mlir/Dialect/Arith/IR/Arith.h"

using namespace mlir;
using namespace mlir::mhc;
using namespace mlir::mhc::wide;

WideConsumer WideMain::consumerValues(int64_t c, int64_t first, int64_t nb) {
  WideConsumer cs{c, first, nb};
  cs.ct = kb.rem(tid, kb.idx(128));
  cs.w = kb.div(cs.ct, kb.idx(32));
  cs.g = kb.div(lane, kb.idx(4)), cs.t = kb.rem(lane, kb.idx(4));
  cs.zero = kb.f32(0.0);
  cs.twoOverK = kb.f32(2.0 / static_cast<double>(p.K));
  cs.leader = kb.eq(cs.ct, kb.idx(0));
  cs.barrierId = kb.i32(c + 1);
  return cs;
}

/// The previous pair's stores have had this pair's wait (and products) to
/// read their stages: the leader's second arrival.
void WideMain::releasePrevious(const WideConsumer &cs, const WidePair &pr) {
  if (p.pieces()) // the threads' own stores read the stages (storePieces)
    return;
  kb.when(kb.andi(cs.leader, kb.lt(kb.idx(0), pr.k)), [&] {
    kb.bulkWait(0, /*readOnly=*/true);
    for (int64_t h = 0; h < 2; ++h)
      kb.mbarrierArrive(ring.empty(ring.stage(kb.sub(pr.i0, kb.idx(2 - h)))));
  });
}

/// D^T [64 columns x 32 tokens] = phi^T gh^T for one box (in this
/// consumer's range; its accumulators beside gphi^T's must fit the
/// registers), with `withGphi` gphi^T += x^T gh into `acc`; waits for both.
SmallVector<Value> WideMain::products(const WideConsumer &cs, const WidePair &pr, Value box,
                                      bool withGphi, SmallVector<Value> &acc) {
  const int64_t N = p.N, cmRow = p.cmRow, phiRow = p.phiRow;
  kb.wgmmaFence();
  SmallVector<Value> d(16, cs.zero);
  Value boxPhi = kb.add(pr.phiHere, kb.mul(box, kb.idx(1024 / 4)));
  for (int64_t s = 0; s < N / 16; ++s) {
    Value a = kb.wgmmaDescriptor(
        smem, kb.add(boxPhi, kb.idx((cs.first * 1024 + s * 2 * phiRow) / 4)), phiRow, 128);
    Value bd = kb.wgmmaDescriptor(smem, kb.add(pr.fplane, kb.idx(s * 256 / 4)), 128, cmRow);
    kb.wgmmaF16Shared(d, a, bd);
  }
  // gphi^T += x^T gh: bf16, gh's hi and lo parts, 16 tokens of each step.
  if (withGphi)
    for (int64_t b = 0; b < cs.nb; ++b)
      for (int64_t h = 0; h < 2; ++h)
        for (int64_t part = 0; part < 2; ++part) {
          Value a = kb.wgmmaDescriptorSwizzled(
              smem, kb.add(pr.at[h], kb.idx((cs.first + b) * kBoxBytes / 4)), kBoxBytes, 1024);
          Value bd = kb.wgmmaDescriptor(
              smem, kb.add(pr.at[h], kb.idx((p.xBytes + part * p.plane) / 4)), cmRow, 128);
          kb.wgmmaBf16Shared(MutableArrayRef<Value>(acc).slice(b * N / 2, N / 2), a, bd,
                             /*transA=*/true, /*transB=*/true);
        }
  kb.wgmmaCommit();
  if (withGphi)
    releasePrevious(cs, pr);
  kb.wgmmaWait(0); // the boxes are free to overwrite
  return d;
}

/// One box's products, then gx = 2^-e 2^-f D + (2/K) gms x over the box
/// in place, by ldmatrix / stmatrix .trans: matrix i of step h holds tokens
/// 8(i / 2) .. + 7 of the step and columns 16w + 8(i % 2) .. + 7 of the
/// box, so lane (g, t) gets accumulators q = 8h + 4(i / 2) + 2(i % 2) + e
/// (tokens 8(i / 2) + 2t + e).
void WideMain::boxGx(const WideConsumer &cs, const WidePair &pr, Value box, bool withGphi,
                     SmallVector<Value> &acc) {
  SmallVector<Value> d = products(cs, pr, box, withGphi, acc);
  for (int64_t h = 0; h < 2; ++h) {
    Value img = kb.add(pr.at[h], kb.idx(p.xBytes / 4));
    Value gm[4], back[4]; // tokens 8(mq / 2) + 2t + mq % 2
    for (int64_t mq = 0; mq < 4; ++mq) {
      Value m = kb.add(kb.mul(cs.t, kb.idx(2)), kb.idx(8 * (mq / 2) + mq % 2));
      gm[mq] = kb.mul(kb.load(smem, kb.add(img, kb.add(kb.idx(p.gmsAt / 4), m))), cs.twoOverK);
      back[mq] = kb.mul(kb.load(smem, kb.add(img, kb.add(kb.idx(p.backAt / 4), m))), phiBack);
    }
    Value ptr = kb.bytePtr(kb.sharedPtr(smem, pr.at[h]),
                           kb.add(pr.rowByte, kb.mul(kb.add(box, kb.idx(cs.first)),
                                                     kb.idx(kBoxBytes))));
    SmallVector<Value> x = kb.ldmatrixX4Trans(ptr), out;
    for (int64_t i = 0; i < 4; ++i) {
      Value v[2];
      for (int64_t e = 0; e < 2; ++e) {
        int64_t q = 8 * h + 4 * (i / 2) + 2 * (i % 2) + e, mq = 2 * (i / 2) + e;
        v[e] = kb.fma(gm[mq], unpackBf16(kb, x[i], e), kb.mul(d[q], back[mq]));
      }
      out.push_back(kb.packBf16x2(v[0], v[1]));
    }
    kb.stmatrixX4Trans(ptr, out);
  }
}

/// Waits for pair k's two stages (an even ring: st0 and st0 + 1). Lane l
/// addresses row l % 8 of ldmatrix's matrix l / 8; the 16-byte pieces of
/// a token row are permuted by the token mod 8.
WidePair WideMain::enterPair(const WideConsumer &cs, Value k) {
  WidePair pr;
  pr.k = k;
  pr.i0 = kb.mul(k, kb.idx(2));
  pr.st0 = ring.wait(pr.i0);
  ring.wait(kb.add(pr.i0, kb.idx(1)));
  pr.at = {stageAt(pr.st0), stageAt(kb.add(pr.st0, kb.idx(1)))};
  if (p.pieces()) // rows R .. 15 came by st.shared (the generic proxy)
    kb.fenceProxyAsyncShared();
  pr.fplane = fplaneAt(pr.st0);
  pr.phiHere = kb.opaque(phiAt);
  if (cs.nb == 0)
    releasePrevious(cs, pr);
  Value li = kb.div(lane, kb.idx(8)), rho = kb.rem(lane, kb.idx(8));
  Value piece = arith::XOrIOp::create(
      kb.b, kb.loc, kb.add(kb.mul(cs.w, kb.idx(2)), kb.rem(li, kb.idx(2))), rho);
  pr.rowByte = kb.add(
      kb.mul(kb.add(kb.mul(kb.div(li, kb.idx(2)), kb.idx(8)), rho), kb.idx(128)),
      kb.mul(piece, kb.idx(16)));
  return pr;
}

/// The pair's gx boxes go out by TMA (or in pieces) once every thread
/// wrote them; each thread's accesses to the stages are done.
void WideMain::storePair(const WideConsumer &cs, const WidePair &pr) {
  kb.fenceProxyAsyncShared();
  kb.namedBarrier(cs.barrierId, 128);
  if (p.pieces()) {
    storePieces(cs, pr);
    kb.fenceProxyAsyncShared(); // its reads before the next TMA writes
  }
  for (int64_t h = 0; h < 2; ++h) // this thread's accesses are done
    kb.mbarrierArrive(ring.empty(kb.add(pr.st0, kb.idx(h))));
  if (p.pieces())
    return;
  kb.when(cs.leader, [&] {
    for (int64_t h = 0; h < 2; ++h) {
      Value m0 = kb.indexToI32(kb.mul(kb.add(pr.i0, kb.idx(h)), kb.idx(kRows)));
      for (int64_t b = cs.first; b < cs.first + cs.nb; ++b)
        kb.tensorStore2d(l.arg("tmap16:gx"),
                         kb.sharedPtr(smem, kb.add(pr.at[h], kb.idx(b * kBoxBytes / 4))),
                         kb.indexToI32(kb.add(colBase, kb.idx(64 * b))), m0);
    }
    kb.bulkCommit();
  });
}

/// gphi[j][col] from accumulator q of box b: pairs of columns of gphi^T
/// are pairs of rows j, j + 1 of gphi.
void WideMain::storeGphi(const WideConsumer &cs, ArrayRef<Value> total) {
  const int64_t N = p.N;
  Value r0 = kb.add(kb.mul(cs.w, kb.idx(16)), cs.g);
  for (int64_t b = 0; b < cs.nb; ++b)
    for (int64_t q = 0; q < N / 2; ++q) {
      Value col = kb.add(kb.idx(64 * (cs.first + b) + 8 * ((q / 2) % 2)), r0);
      Value j = kb.add(kb.idx(8 * (q / 4) + q % 2), kb.mul(cs.t, kb.idx(2)));
      auto store = [&] { kb.storeFrom({total[b * N / 2 + q]}, l.arg("gphi"), phiAtCol(j, col)); };
      if (p.tail) // not past K (the next row's columns)
        kb.when(kb.lt(kb.add(colBase, col), kb.idx(p.K)), store);
      else
        store();
    }
}

/// Consumer c takes boxes [first, first + nb) of every pair of steps: box
/// 0 with gphi's products, the others in a loop (unrolled, the JIT took
/// longer still).
void WideMain::consume(int64_t c, int64_t first, int64_t nb) {
  kb.setMaxRegisters(p.pieces() ? kPiecesConsumerRegs : kConsumerRegs, /*increase=*/true);
  WideConsumer cs = consumerValues(c, first, nb);
  // Accumulator i of a m64nN fragment: row 16w + g + 8((i / 2) % 2),
  // column 8(i / 4) + 2t + i % 2.
  SmallVector<Value> init(nb * p.N / 2, cs.zero); // gphi^T, a m-tile per box
  SmallVector<Value> total = kb.loop(
      kb.idx(0), pairsOf(l.tokens()), kb.idx(1), init, [&](Value k, ValueRange it) {
        SmallVector<Value> acc(it.begin(), it.end());
        WidePair pr = enterPair(cs, k);
        if (nb > 0)
          boxGx(cs, pr, kb.idx(0), /*withGphi=*/true, acc);
        if (nb > 1)
          kb.loop(kb.idx(1), kb.idx(nb), kb.idx(1),
                  [&](Value box) { boxGx(cs, pr, box, false, acc); });
        storePair(cs, pr);
        return acc;
      });
  if (!p.pieces())
    kb.when(cs.leader, [&] { kb.bulkWait(0, /*readOnly=*/false); });
  storeGphi(cs, total);
}
