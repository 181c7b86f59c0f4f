//===- BackwardWgmmaMain.cpp - the wgmma backward's launch "main" ---------===//
//
// The block's slice and share, phi's parts staged once, the producer
// (thread 0 of warpgroup 0: TMA tiles of x and the gh image into the ring,
// paced across the wave) and the consumers' values; their steps are in
// BackwardWgmmaConsumer.cpp.
//
//===----------------------------------------------------------------------===//

#include "builder/WavePacer.h"
#include "kernels/project/BackwardWgmma.h"
#include "kernels/project/Fragments.h"

using namespace mlir;
using namespace mlir::mhc;
using namespace mlir::mhc::wgmma;

WgmmaMain::WgmmaMain(KernelContext &ctx, const WgmmaPlan &p, LaunchBuilder &l)
    : p(p), l(l), kb(ctx.begin(l)), M(l.tokens()), tid(kb.threadId()),
      bid(kb.blockId()), smem(l.shared(0)), ring(kb, l.shared(1), p.stages, 4) {
  slice = kb.rem(bid, kb.idx(p.slices)), share = kb.div(bid, kb.idx(p.slices));
  colBase = kb.mul(slice, kb.idx(kCols));
  Value steps = kb.div(kb.add(M, kb.idx(kTokens - 1)), kb.idx(kTokens));
  per = kb.div(kb.add(steps, kb.idx(p.shares - 1)), kb.idx(p.shares));
  s0 = kb.min(kb.mul(share, per), steps);
  count = kb.sub(kb.min(kb.add(s0, per), steps), s0);
  phiAt = alignedFloatIndex(kb, smem, kAlign); // the swizzle follows the address
  outAt = kb.add(phiAt, kb.idx((p.phiBytes + p.stages * p.stageBytes) / 4));
}

Value WgmmaMain::stageAt(Value st) { // floats
  return kb.add(phiAt, kb.add(kb.idx(p.phiBytes / 4), kb.mul(st, kb.idx(p.stageBytes / 4))));
}

/// phi's hi and lo parts as D's B: [N rows][128 columns], K-major core
/// matrices (8 columns x 8 rows), 8 rows of phi per phiRow bytes.
void WgmmaMain::stagePhi() {
  const int64_t K = p.K;
  kb.loop(tid, kb.idx(p.N / 2 * kCols), kb.idx(384), [&](Value e) {
    Value j = kb.mul(kb.div(e, kb.idx(kCols)), kb.idx(2)), col = kb.rem(e, kb.idx(kCols));
    Value at = kb.add(kb.mul(j, kb.idx(K)), kb.add(colBase, col));
    SmallVector<Value> words = bf16PartWords(kb, kb.toF32(kb.load(l.arg("phi"), at)),
                                             kb.toF32(kb.load(l.arg("phi"), kb.add(at, kb.idx(K)))));
    Value to = kb.add(phiAt, kb.div(coreMatrixByte(kb, col, j, 128, p.phiRow), kb.idx(4)));
    for (int64_t part = 0; part < 2; ++part)
      kb.store(words[part], smem, kb.add(to, kb.idx(part * p.phiPlane / 4)));
  });
  kb.fenceProxyAsyncShared(); // the products read phi through the async proxy
}

/// Producer: thread 0 of warpgroup 0.
void WgmmaMain::produce() {
  kb.setMaxRegisters(40, /*increase=*/false);
  kb.when(kb.eq(tid, kb.idx(0)), [&] {
    // This block's wave and its size (WavePacer: the counter and the
    // flag after the mbarriers).
    const int64_t sms = p.sms;
    Value wave = kb.div(bid, kb.idx(sms));
    Value peers = kb.min(kb.idx(sms), kb.sub(kb.idx(p.blocks), kb.mul(wave, kb.idx(sms))));
    WavePacer pacer(kb, kb.globalPtr(l.arg("progress"), wave),
                    kb.sharedPtr(l.shared(1), kb.idx(2 * p.stages)), peers,
                    /*epoch=*/1, kPaceLag);
    kb.loop(kb.idx(0), count, kb.idx(1), [&](Value i) {
      pacer.before(i);
      ring.produce(i, [&](Value st) {
        Value at = stageAt(st), bar = ring.full(st);
        Value m0 = kb.mul(kb.add(s0, i), kb.idx(kTokens));
        kb.mbarrierArriveExpectTx(bar, 2 * kTile + p.imageBytes);
        for (int64_t c = 0; c < 2; ++c)
          kb.tensorLoad2d(kb.sharedPtr(smem, kb.add(at, kb.idx(c * kTile / 4))),
                          l.arg("tmap:x"),
                          kb.indexToI32(kb.add(colBase, kb.idx(64 * c))),
                          kb.indexToI32(m0), bar);
        kb.bulkCopy(kb.sharedPtr(smem, kb.add(at, kb.idx(2 * kTile / 4))),
                    kb.globalPtr(l.arg("ghp"), kb.mul(kb.add(s0, i), kb.idx(p.imageFloats))),
                    p.imageBytes, bar);
      });
      pacer.after(i);
    });
    pacer.finish(per, count);
  });
}

WgmmaConsumer WgmmaMain::consumerValues() {
  WgmmaConsumer cs;
  cs.c = kb.sub(wg, kb.idx(1)), cs.ct = kb.rem(tid, kb.idx(128));
  cs.w = kb.div(cs.ct, kb.idx(32)), cs.lane = kb.rem(cs.ct, kb.idx(32));
  cs.g = kb.div(cs.lane, kb.idx(4)), cs.t = kb.rem(cs.lane, kb.idx(4));
  cs.r0 = kb.add(kb.mul(cs.w, kb.idx(16)), cs.g);
  cs.zero = kb.f32(0.0);
  cs.twoOverK = kb.f32(2.0 / static_cast<double>(p.K));
  cs.leader = kb.eq(cs.ct, kb.idx(0));
  cs.barrierId = kb.indexToI32(wg); // 1 or 2: this warpgroup's barrier
  cs.out = kb.add(outAt, kb.mul(cs.c, kb.idx(2 * kTile / 4)));
  return cs;
}

void WgmmaMain::emit() {
  stagePhi();
  ring.init(); // the mbarriers, then every thread past the phi writes
  wg = kb.div(tid, kb.idx(128));
  kb.when(kb.eq(wg, kb.idx(0)), [&] { produce(); });
  kb.when(kb.lt(kb.idx(0), wg), [&] { consume(); });
}
