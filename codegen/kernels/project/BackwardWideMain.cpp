//===- BackwardWideMain.cpp - the one-wave backward's launch "main" -------===//
//
// Launch "main": a block per slice of 64 * boxes columns, one wave.
// Warpgroup 0's thread 0 fills a ring of stages (the x boxes, 16 tokens x
// 128 bytes each by TMA, the image's bf16 parts, gms and scales by one
// bulk copy) and a ring of f16 planes beside it (adjacent for adjacent
// steps), paced against the other blocks (WavePacer). Warpgroups 1 and 2
// split the boxes (4 + 3 at n = 8, C = 7168; each its own code path, the
// first box unrolled and the rest in a loop) and take every step, in
// pairs:
//   D^T [64 columns x 32 tokens] = phi^T gh^T, f16 m64n32k16 over both
//     steps' planes (with 16 tokens phi's shared-memory reads were the
//     bound), a box at a time;
//   gphi^T [64 columns x N] += x^T gh, bf16 m64nNk16 (hi, lo), kept in
//     registers over all steps, stored to gphi at the end;
//   gx = 2^-e 2^-f D + (2/K) gms x written over the x box in place through
//     ldmatrix / stmatrix .trans (2-byte accesses made the kernel
//     instruction-bound), stored by TMA; a stage goes back to the producer
//     once every consumer thread is done with it and those stores have read
//     it (during the next pair).
//
// This file: the launch, its shared-memory layout, phi's scale and f16
// plane, the producer; the consumers are BackwardWideConsumer.cpp's.
//
//===----------------------------------------------------------------------===//

#include "builder/WavePacer.h"
#include "kernels/project/BackwardWide.h"
#include "kernels/project/Fragments.h"
#include "kernels/project/Project.h"

#include "mlir/Dialect/Arith/IR/Arith.h"

using namespace mlir;
using namespace mlir::mhc;
using namespace mlir::mhc::wide;

namespace {
/// "tmap<rows>,<P>,<r>": boxes of `rows` rows over tokens r, r + P, ...
std::string phaseShape(const WidePlan &p, int64_t rows, int64_t r) {
  return "tmap" + std::to_string(rows) + "," + std::to_string(p.phases) + "," +
         std::to_string(r);
}
} // namespace

/// Parameter "tmap..:x" of x's phase map r: map 0's boxes are the swizzled
/// boxes' rows 0 .. R - 1; the others' are staged, in granules.
std::string wide::phaseMap(const WidePlan &p, int64_t r) {
  if (r == 0)
    return phaseShape(p, p.phaseRows, 0) + ":x";
  return phaseShape(p, p.phaseRows, r) + "," + std::to_string(p.stagedWidth) + "," +
         std::to_string(kStagedGranule) + ":x";
}
std::string wide::phaseEdgeMap(const WidePlan &p, int64_t r) {
  return phaseShape(p, 1, r) + "," + std::to_string(kStagedGranule) + ":x";
}

namespace {

LaunchBuilder &mainLaunch(KernelContext &ctx, const WidePlan &p, int64_t scratchAt) {
  LaunchBuilder &l = ctx.launch("main");
  if (!p.pieces())
    l.param("tmap16:x").param("tmap16:gx");
  else {
    for (int64_t r = 0; r < p.phases; ++r) // x's phase maps (WidePlan)
      l.param(phaseMap(p, r));
    for (int64_t r = 1; r < p.phases; ++r) // the same at the buffer's end
      l.param(phaseEdgeMap(p, r));
    l.param("gx");
    if (ctx.spec.readsAcc()) // added where gx is stored (storePieces)
      l.param("acc");
  }
  l.param("ghp").param("phi").param("gphi").param("progress").param("M").block(384)
      .grid({0, p.slices})
      .sharedF32(scratchAt + 16, 128)
      // the ring's mbarriers, the producer's pacing flag, the staging slots'
      // (full, then free)
      .sharedI64(2 * p.stages + 1 + 2 * p.slots)
      .minBlocksPerSM(1);
  return l;
}

} // namespace

// A stage is free once every consumer thread is done with it (each arrives
// for its own accesses: compute-sanitizer's racecheck sees no order through
// a named barrier and one thread's arrival) and both consumers' TMA stores
// have read it (their leaders arrive again; in pieces the threads' own
// stores read it before their arrivals). A stage filled by phase maps is
// full once thread 0's copies are in and every unpacker has copied its
// part of the staged rows.
WideMain::WideMain(KernelContext &ctx, const WidePlan &p)
    : p(p), spec(ctx.spec), fplaneAt0((p.phiBytes + p.stages * p.stageBytes) / 4),
      scratchAt((kAlign + p.stagingAt + p.slots * p.slotBytes) / 4),
      l(mainLaunch(ctx, p, scratchAt)), kb(ctx.begin(l)), tid(kb.threadId()),
      bid(kb.blockId()), smem(l.shared(0)),
      ring(kb, l.shared(1), p.stages, /*arrivals=*/2 * 128 + (p.pieces() ? 0 : 2)) {
  if (p.pieces()) {
    ring.fullArrivals = 1 + kUnpackers;
    limitRowAccesses(ctx, kb, l, {"gx", "acc"});
  }
  colBase = kb.mul(bid, kb.idx(p.W));
  pacerCounter = kb.globalPtr(l.arg("progress"), kb.idx(0));
  pacerFlag = kb.sharedPtr(l.shared(1), kb.idx(2 * p.stages));
  pacerPeers = kb.idx(p.slices);
  lane = kb.rem(tid, kb.idx(32)), warp = kb.div(tid, kb.idx(32));
  phiAt = alignedFloatIndex(kb, smem, kAlign); // floats
}

/// Steps in pairs (the producer fills a last odd step's partner with zeros
/// past M).
Value WideMain::pairsOf(Value m) {
  return kb.div(kb.add(m, kb.idx(2 * kRows - 1)), kb.idx(2 * kRows));
}

Value WideMain::stageAt(Value st) { // floats
  return kb.add(phiAt, kb.add(kb.idx(p.phiBytes / 4), kb.mul(st, kb.idx(p.stageBytes / 4))));
}

Value WideMain::fplaneAt(Value st) { // floats: step's f16 plane
  return kb.add(phiAt, kb.add(kb.idx(fplaneAt0), kb.mul(st, kb.idx(p.plane / 4))));
}

Value WideMain::phiAtCol(Value j, Value col) {
  return kb.add(kb.mul(j, kb.idx(p.K)), kb.add(colBase, col));
}

/// phi[j][colBase + col] as f32, 0 past K (the last block's columns).
Value WideMain::loadPhi(Value j, Value col) {
  if (!p.tail)
    return kb.toF32(kb.load(l.arg("phi"), phiAtCol(j, col)));
  Value at = kb.add(colBase, col), last = kb.idx(p.K - 1);
  Value v = kb.toF32(kb.load(l.arg("phi"), kb.add(kb.mul(j, kb.idx(p.K)), kb.min(at, last))));
  return kb.select(kb.lt(at, kb.idx(p.K)), v, kb.f32(0.0));
}

/// This block's phi scale and its inverse: the largest |phi| of the slice,
/// over the warps through shared memory (a max: the same whatever the
/// order).
std::pair<Value, Value> WideMain::phiScale() {
  const int64_t W = p.W;
  Value mag = kb.loop(tid, kb.idx(p.N * W), kb.idx(384), {kb.i32(0)},
                      [&](Value e, ValueRange it) {
                        Value v = loadPhi(kb.div(e, kb.idx(W)), kb.rem(e, kb.idx(W)));
                        return SmallVector<Value>{kb.max(it[0], magnitudeBits(kb, v))};
                      })[0];
  mag = laneGroupMax(kb, mag, 32);
  kb.when(kb.eq(lane, kb.idx(0)), [&] {
    kb.store(arith::BitcastOp::create(kb.b, kb.loc, kb.b.getF32Type(), mag), smem,
             kb.add(kb.idx(scratchAt), warp));
  });
  kb.barrier();
  Value blockMag = kb.i32(0);
  for (int64_t w = 0; w < 12; ++w)
    blockMag = kb.max(blockMag, arith::BitcastOp::create(
                                    kb.b, kb.loc, kb.b.getI32Type(),
                                    kb.load(smem, kb.idx(scratchAt + w))).getResult());
  return f16Scale(kb, blockMag);
}

/// phi as D^T's A: [W columns][N rows], K-major core matrices (8 columns
/// x 8 rows of phi, 16-byte column rows), 8 rows of phi per phiRow bytes.
void WideMain::stagePhi(Value scale) {
  const int64_t W = p.W;
  kb.loop(tid, kb.idx(p.N / 2 * W), kb.idx(384), [&](Value e) {
    Value j = kb.mul(kb.div(e, kb.idx(W)), kb.idx(2)), col = kb.rem(e, kb.idx(W));
    Value v0 = kb.mul(loadPhi(j, col), scale);
    Value v1 = kb.mul(loadPhi(kb.add(j, kb.idx(1)), col), scale);
    kb.store(packF16x2(kb, v0, v1), smem,
             kb.add(phiAt, kb.div(coreMatrixByte(kb, col, j, 128, p.phiRow), kb.idx(4))));
  });
  kb.fenceProxyAsyncShared(); // the products read phi through the async proxy
}

/// The producer's pacing against the other blocks (thread 0's).
WavePacer WideMain::makePacer() {
  return WavePacer(kb, pacerCounter, pacerFlag, pacerPeers, kEpoch, /*lag=*/1);
}

/// Thread 0's part of step i in stage st: the x boxes by TMA (by phase map
/// 0 where x's rows are not 16-byte aligned: rows 0 .. R - 1), the step's
/// image of gh by two bulk copies.
void WideMain::issueStep(Value i, Value st) {
  Value at = stageAt(st), bar = ring.full(st);
  Value row = kb.indexToI32(kb.mul(i, kb.idx(p.phaseRows)));
  Value src = kb.mul(i, kb.idx(p.imageFloats));
  kb.mbarrierArriveExpectTx(bar, p.boxes * p.phaseRows * 128 + p.image);
  for (int64_t b = 0; b < p.boxes; ++b)
    kb.tensorLoad2d(kb.sharedPtr(smem, kb.add(at, kb.idx(b * kBoxBytes / 4))),
                    l.arg(p.pieces() ? phaseMap(p, 0) : "tmap16:x"),
                    kb.indexToI32(kb.add(colBase, kb.idx(64 * b))), row, bar);
  kb.bulkCopy(kb.sharedPtr(smem, fplaneAt(st)), kb.globalPtr(l.arg("ghp"), src), p.plane,
              bar);
  kb.bulkCopy(kb.sharedPtr(smem, kb.add(at, kb.idx(p.xBytes / 4))),
              kb.globalPtr(l.arg("ghp"), kb.add(src, kb.idx(p.plane / 4))), p.rest, bar);
}

/// Producer: thread 0 of warpgroup 0, paced against the other blocks (and
/// warps 1 .. 3 where x comes by phase maps: producePhases).
void WideMain::produce() {
  kb.setMaxRegisters(p.pieces() ? kPiecesProducerRegs : kProducerRegs, /*increase=*/false);
  if (p.pieces()) {
    producePhases();
    return;
  }
  kb.when(kb.eq(tid, kb.idx(0)), [&] {
    Value steps = kb.mul(pairsOf(l.tokens()), kb.idx(2));
    WavePacer pacer = makePacer();
    kb.loop(kb.idx(0), steps, kb.idx(1), [&](Value i) {
      pacer.before(i);
      ring.produce(i, [&](Value st) { issueStep(i, st); });
      pacer.after(i);
    });
    pacer.finish(steps, steps);
  });
}

void WideMain::emit() {
  auto [scale, back] = phiScale();
  phiBack = back;
  stagePhi(scale);
  kb.when(kb.eq(tid, kb.idx(0)), [&] { // the staging slots': the issuer's, the unpackers'
    for (int64_t s = 0; s < p.slots; ++s) {
      kb.mbarrierInit(slotBar(kb.idx(s), false), 1);
      kb.mbarrierInit(slotBar(kb.idx(s), true), kUnpackers);
    }
  });
  ring.init(); // the mbarriers, then every thread past the phi writes
  Value wg = kb.div(tid, kb.idx(128));
  kb.when(kb.eq(wg, kb.idx(0)), [&] { produce(); });
  kb.when(kb.eq(wg, kb.idx(1)), [&] { consume(0, 0, p.split); });
  kb.when(kb.eq(wg, kb.idx(2)), [&] { consume(1, p.split, p.boxes - p.split); });
}
