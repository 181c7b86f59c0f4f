//===- BackwardWide.cpp - n = 6, 8 projection backward in one wave --------===//
//
// gx = gh phi + (2/K) gms x and gphi = gh^T x for bf16 x, tf32 mode, no
// weight, on sm_90a, when the columns split into at most one block per SM
// of at most 8 boxes of 64 columns (n = 8: C <= 8448).
//
// Why: a wave of long-lived blocks copies x and gx faster the more of each
// token row it covers at once (a TMA copy of this pattern beats the wgmma
// kernel's 128 columns x 64 tokens: docs/design/project.md). One block per column slice walks every token, so gphi needs no partial
// sums either.
//
// Shared memory decides the rest. phi for 448 columns must stay resident,
// and the copy needs six 14 KB stages in flight, so phi is held as one f16
// plane (70 KB; bf16 hi and lo parts would take 140 KB): scaled by a power
// of two per block so that max |phi| lies in [2^14, 2^15), which leaves f16
// the relative precision of tf32 (2^-11) over the whole range that matters.
// gh for D gets the same treatment per token (one f16 plane), and D^T =
// phi^T gh^T runs as one f16 wgmma pass, unscaled exactly (powers of two)
// in the epilogue: tf32's precision for both operands.
//
// Launch "pad" (a block per pair of steps) writes each 16-token step's
// image of gh: the f16 plane of gh scaled per token, bf16 hi and lo parts
// of gh (gphi's B, as in the wgmma kernel), gms and the token's scale back
// (2^-e), as core matrices of 8 tokens x 8 rows of gh (16-byte token
// rows). Block 0 also zeroes the main launch's pacing counter.
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
// It is faster than the wgmma kernel where both apply (docs/design/project.md).
//
//===----------------------------------------------------------------------===//

#include "builder/BulkRing.h"
#include "builder/WavePacer.h"
#include "kernels/project/Fragments.h"
#include "kernels/project/Project.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"

#include <optional>

using namespace mlir;
using namespace mlir::mhc;
using ::mhc::BufferRole;
using ::mhc::DType;

namespace {

constexpr int64_t kRows = 16;              // tokens per step (a box's rows)
constexpr int64_t kBoxBytes = kRows * 128; // 64 bf16 columns x 16 tokens
constexpr int64_t kMaxBoxes = 8;   // gphi^T accumulators: 4 boxes per consumer
constexpr int64_t kMinStages = 4;  // even: the consumers take steps in pairs
constexpr int64_t kMaxStages = 8;
constexpr int64_t kAlign = 1024;   // the swizzle's period in shared memory
constexpr int64_t kEpoch = 2;      // pacing: steps per epoch (fastest measured)
// Registers per thread after setmaxnreg: 128 x (24 + 2 x 240) = 64512.
constexpr int64_t kProducerRegs = 24, kConsumerRegs = 240;

/// Bytes of one part of a step's gh image: 16 tokens x N 2-byte values.
int64_t planeBytes(int64_t N) { return kRows * N * 2; }
/// Bytes of one step's gh image: the f16 plane (gh scaled per token), the
/// bf16 hi and lo planes, then gms and the token's scale back (f32 each).
int64_t imageBytes(int64_t N) { return 3 * planeBytes(N) + 2 * kRows * 4; }

/// The kernel's plan: the boxes per block and the ring's depth, which
/// shared memory decides, and the layouts that follow (bytes).
struct WidePlan {
  int64_t N, K;
  int64_t boxes, slices, stages, stageBytes;
  int64_t W;                          // columns per block
  int64_t plane, image, imageFloats;  // one part of a step's gh; the image
  int64_t rest;                       // the stage's part of the image
  int64_t xBytes, gmsAt, backAt;      // in a stage: the x boxes, then bf16
                                      // hi, lo, gms, back
  int64_t cmRow;                      // 8 tokens of a plane
  int64_t phiBytes, phiRow;           // phi; 8 rows of phi
  int64_t split;                      // consumer 1's first box
};

/// The plan for `boxes` boxes per block, if the stages fit.
std::optional<WidePlan> planBoxes(const KernelContext &ctx, int64_t boxes) {
  const int64_t N = ctx.N(), K = ctx.K();
  WidePlan p;
  p.N = N, p.K = K, p.boxes = boxes, p.slices = K / 64 / boxes, p.W = 64 * boxes;
  p.plane = planeBytes(N), p.image = imageBytes(N), p.imageFloats = p.image / 4;
  // A stage: the x boxes and the image past its f16 plane, which goes
  // to a ring of its own (consecutive steps' planes adjacent: one B
  // operand for a pair of steps).
  p.rest = p.image - p.plane;
  p.stageBytes = (boxes * kBoxBytes + p.rest + kAlign - 1) / kAlign * kAlign;
  int64_t room = LaunchBuilder::sharedLimit(ctx.spec.arch) - kAlign - 64 * boxes * N * 2 - 64 -
                 8 * (2 * kMaxStages + 1);
  p.stages = std::min(kMaxStages, room / (p.stageBytes + p.plane)) / 2 * 2;
  if (p.stages < kMinStages)
    return std::nullopt;
  p.xBytes = boxes * kBoxBytes;
  p.gmsAt = 2 * p.plane, p.backAt = p.gmsAt + kRows * 4;
  p.cmRow = N / 8 * 128;
  p.phiBytes = p.W * N * 2, p.phiRow = p.W / 8 * 128;
  p.split = (boxes + 1) / 2;
  return p;
}

/// The fewest boxes per block (at most kMaxBoxes) that split the columns
/// evenly into one wave, if its stages fit.
std::optional<WidePlan> planWide(const KernelContext &ctx) {
  const ::mhc::KernelSpec &s = ctx.spec;
  if (!(s.arch == "sm_90a" && s.tf32 && s.act == DType::BF16 && !s.hasWeight &&
        (s.n == 6 || s.n == 8)))
    return std::nullopt;
  const int64_t K = ctx.K(), sms = ctx.smCount();
  if (K % 64)
    return std::nullopt;
  const int64_t total = K / 64;
  for (int64_t b = (total + sms - 1) / sms; b <= kMaxBoxes; ++b)
    if (total % b == 0)
      return planBoxes(ctx, b);
  return std::nullopt;
}

/// The power of two that brings a value whose |bits| (f32 bits without the
/// sign) are `mag` into [2^14, 2^15): the f32 scale and its inverse. A NaN
/// or infinity gets 1 (it propagates as it is); zero and the tiniest values
/// 2^126, so that the inverse stays a normal number.
std::pair<Value, Value> f16Scale(KernelBuilder &kb, Value mag) {
  Type f32 = kb.b.getF32Type();
  Value e = kb.div(mag, kb.i32(1 << 23)); // the exponent field, 0..255
  Value f = kb.min(kb.sub(kb.i32(268), kb.min(e, kb.i32(254))), kb.i32(253));
  f = kb.select(kb.eq(e, kb.i32(255)), kb.i32(127), f); // 127 + log2(scale)
  Value inv = kb.sub(kb.i32(254), f);
  auto pow2 = [&](Value field) {
    return arith::BitcastOp::create(kb.b, kb.loc, f32, kb.mul(field, kb.i32(1 << 23)))
        .getResult();
  };
  return {pow2(f), pow2(inv)};
}

/// |v|'s f32 bits (NaN above infinity above every finite value).
Value magnitudeBits(KernelBuilder &kb, Value v) {
  Value bits = arith::BitcastOp::create(kb.b, kb.loc, kb.b.getI32Type(), kb.toF32(v));
  return kb.andi(bits, kb.i32(0x7fffffff));
}

/// The largest of an i32 over `lanes` aligned lanes (a power of two).
Value laneGroupMax(KernelBuilder &kb, Value v, int lanes) {
  Type f32 = kb.b.getF32Type(), i32 = kb.b.getI32Type();
  for (int off = lanes / 2; off >= 1; off /= 2) {
    Value other = kb.shuffleXor(arith::BitcastOp::create(kb.b, kb.loc, f32, v), off);
    v = kb.max(v, arith::BitcastOp::create(kb.b, kb.loc, i32, other).getResult());
  }
  return v;
}

/// Two values as f16 (round to nearest even) in one word, the first low.
Value packF16x2(KernelBuilder &kb, Value v0, Value v1) {
  Type f16 = kb.b.getF16Type();
  Value v = kb.vector({kb.toType(v0, f16), kb.toType(v1, f16)});
  Value word = LLVM::BitcastOp::create(kb.b, kb.loc, kb.b.getI32Type(), v);
  return arith::BitcastOp::create(kb.b, kb.loc, kb.b.getF32Type(), word);
}

/// bf16 e of a word (two bf16), as f32.
Value unpackBf16(KernelBuilder &kb, Value word, int64_t e) {
  Value bits = e == 0 ? kb.mul(word, kb.i32(1 << 16))
                      : kb.andi(word, kb.i32(static_cast<int32_t>(0xffff0000u)));
  return arith::BitcastOp::create(kb.b, kb.loc, kb.b.getF32Type(), bits).getResult();
}

/// Launch "pad", a block per pair of steps: gh's 32 rows read coalesced
/// into shared memory (rows padded to N + 1 floats: no bank conflicts), the
/// two images built there, then written out in 16-byte pieces (they are
/// adjacent in ghp).
class WidePad {
public:
  WidePad(KernelContext &ctx, const WidePlan &p);
  void emit();

private:
  Value imageAt(Value tok);
  void loadRows();
  void tokenScales();
  void writeWords();

  const WidePlan &p;
  const int64_t rowF, imgAt, scalesAt; // floats in shared memory
  LaunchBuilder &l;
  KernelBuilder kb;
  Value M, bid, tid, sm, zero, first;
};

LaunchBuilder &padLaunch(KernelContext &ctx, int64_t scalesAt) {
  LaunchBuilder &l = ctx.launch("pad");
  l.param("gh").param("gms").param("ghp").param("progress").param("M").block(256)
      .grid({2 * kRows, 0}).sharedF32(scalesAt + 2 * kRows, 16);
  return l;
}

WidePad::WidePad(KernelContext &ctx, const WidePlan &p)
    : p(p), rowF(p.N + 1), imgAt(2 * kRows * rowF), scalesAt(imgAt + 2 * p.imageFloats),
      l(padLaunch(ctx, scalesAt)), kb(ctx.begin(l)) {}

Value WidePad::imageAt(Value tok) { // floats: token tok's step image in sm
  return kb.add(kb.idx(imgAt), kb.mul(kb.div(tok, kb.idx(kRows)), kb.idx(p.imageFloats)));
}

/// The pair's rows of gh, 0 past M.
void WidePad::loadRows() {
  const int64_t N = p.N;
  Value valid = kb.mul(kb.sub(kb.min(M, kb.add(first, kb.idx(2 * kRows))), first), kb.idx(N));
  kb.loop(tid, kb.idx(2 * kRows * N), kb.idx(256), [&](Value e) {
    Value g = kb.load(l.arg("gh"), kb.add(kb.mul(first, kb.idx(N)), kb.min(e, kb.sub(valid, kb.idx(1)))));
    Value at = kb.add(kb.mul(kb.div(e, kb.idx(N)), kb.idx(rowF)), kb.rem(e, kb.idx(N)));
    kb.store(kb.select(kb.lt(e, valid), g, zero), sm, at);
  });
}

/// The token's scale: 8 threads per token, N / 8 values each; the scale
/// goes to scalesAt, gms and the scale back into the token's image.
void WidePad::tokenScales() {
  const int64_t N = p.N;
  Value tok = kb.div(tid, kb.idx(8)), part = kb.rem(tid, kb.idx(8));
  Value r = kb.add(first, tok);
  Value mag = kb.i32(0);
  for (int64_t q = 0; q < N / 8; ++q)
    mag = kb.max(mag, magnitudeBits(kb, kb.load(sm, kb.add(kb.mul(tok, kb.idx(rowF)),
                                                          kb.add(kb.mul(part, kb.idx(N / 8)), kb.idx(q))))));
  auto [scale, back] = f16Scale(kb, laneGroupMax(kb, mag, 8));
  kb.when(kb.eq(part, kb.idx(0)), [&] {
    Value at = kb.add(imageAt(tok), kb.rem(tok, kb.idx(kRows)));
    kb.store(scale, sm, kb.add(kb.idx(scalesAt), tok));
    kb.store(back, sm, kb.add(at, kb.idx((p.plane + p.backAt) / 4)));
    Value g = kb.load(l.arg("gms"), kb.min(r, kb.sub(M, kb.idx(1))));
    kb.store(kb.select(kb.lt(r, M), g, zero), sm, kb.add(at, kb.idx((p.plane + p.gmsAt) / 4)));
  });
}

/// A word (two rows of gh) per item and part: f16 of the scaled values,
/// bf16 hi and lo parts of the values; a warp takes 32 tokens of one pair
/// of rows.
void WidePad::writeWords() {
  const int64_t N = p.N;
  kb.loop(tid, kb.idx(2 * kRows * N / 2), kb.idx(256), [&](Value e) {
    Value tok = kb.rem(e, kb.idx(2 * kRows)), j = kb.mul(kb.div(e, kb.idx(2 * kRows)), kb.idx(2));
    Value row = kb.mul(tok, kb.idx(rowF));
    Value g0 = kb.load(sm, kb.add(row, j)), g1 = kb.load(sm, kb.add(row, kb.add(j, kb.idx(1))));
    Value scale = kb.load(sm, kb.add(kb.idx(scalesAt), tok));
    SmallVector<Value> words = {packF16x2(kb, kb.mul(g0, scale), kb.mul(g1, scale))};
    words.append(bf16PartWords(kb, g0, g1));
    Value to = kb.add(imageAt(tok),
                      kb.div(coreMatrixByte(kb, kb.rem(tok, kb.idx(kRows)), j, p.cmRow, 128), kb.idx(4)));
    for (int64_t part = 0; part < 3; ++part)
      kb.store(words[part], sm, kb.add(to, kb.idx(part * p.plane / 4)));
  });
}

void WidePad::emit() {
  M = l.tokens(), bid = kb.blockId(), tid = kb.threadId();
  sm = l.shared(0);
  kb.when(kb.eq(bid, kb.idx(0)), [&] { WavePacer::clear(kb, l.arg("progress"), 1, 256); });
  zero = kb.f32(0.0);
  first = kb.mul(bid, kb.idx(2 * kRows));
  loadRows();
  kb.barrier();
  tokenScales();
  kb.barrier();
  writeWords();
  kb.barrier();
  Value out = kb.mul(bid, kb.idx(2 * p.imageFloats));
  kb.loop(kb.mul(tid, kb.idx(4)), kb.idx(2 * p.imageFloats), kb.idx(4 * 256), [&](Value e) {
    kb.vstore(kb.vload(sm, kb.add(kb.idx(imgAt), e), 4), l.arg("ghp"), kb.add(out, e));
  });
}

} // namespace

namespace {

/// A consumer warpgroup (c = 0, 1) and its boxes [first, first + nb) of
/// every pair of steps: its thread ct, warp w, lane (g, t), its named
/// barrier.
struct WideConsumer {
  int64_t c, first, nb;
  Value ct, w, g, t, zero, twoOverK, leader, barrierId;
};

/// A pair of steps k (steps i0, i0 + 1) as a consumer sees it: the
/// stages, the f16 plane of both steps, phi's base (opaque: descriptors per
/// use) and this lane's ldmatrix row within a box.
struct WidePair {
  Value k, i0, st0;
  std::array<Value, 2> at;
  Value fplane, phiHere, rowByte;
};

/// Launch "main": the block's column slice and shared-memory layout, and
/// the emission of its parts (phi's scale and f16 plane, the producer, the
/// consumers' pairs of steps).
class WideMain {
public:
  WideMain(KernelContext &ctx, const WidePlan &p);
  void emit();

private:
  Value pairsOf(Value m);
  Value stageAt(Value st);
  Value fplaneAt(Value st);
  Value phiAtCol(Value j, Value col);
  std::pair<Value, Value> phiScale();
  void stagePhi(Value scale);
  void produce();
  WideConsumer consumerValues(int64_t c, int64_t first, int64_t nb);
  void releasePrevious(const WideConsumer &cs, const WidePair &pr);
  SmallVector<Value> products(const WideConsumer &cs, const WidePair &pr, Value box,
                              bool withGphi, SmallVector<Value> &acc);
  void boxGx(const WideConsumer &cs, const WidePair &pr, Value box, bool withGphi,
             SmallVector<Value> &acc);
  WidePair enterPair(const WideConsumer &cs, Value k);
  void storePair(const WideConsumer &cs, const WidePair &pr);
  void storeGphi(const WideConsumer &cs, ArrayRef<Value> total);
  void consume(int64_t c, int64_t first, int64_t nb);

  const WidePlan &p;
  const int64_t fplaneAt0, scratchAt; // floats past phiAt; floats
  LaunchBuilder &l;
  KernelBuilder kb;
  Value tid, bid, smem;
  BulkRing ring;
  Value colBase, lane, warp, phiAt, phiBack;
};

LaunchBuilder &mainLaunch(KernelContext &ctx, const WidePlan &p, int64_t scratchAt) {
  LaunchBuilder &l = ctx.launch("main");
  l.param("tmap16:x").param("tmap16:gx").param("ghp").param("phi").param("gphi")
      .param("progress").param("M").block(384).grid({0, p.slices})
      .sharedF32(scratchAt + 16, 128)
      .sharedI64(2 * p.stages + 1) // the mbarriers, then the producer's pacing flag
      .minBlocksPerSM(1);
  return l;
}

// A stage is free once every consumer thread is done with it (each arrives
// for its own accesses: compute-sanitizer's racecheck sees no order through
// a named barrier and one thread's arrival) and both consumers' TMA stores
// have read it (their leaders arrive again).
WideMain::WideMain(KernelContext &ctx, const WidePlan &p)
    : p(p), fplaneAt0((p.phiBytes + p.stages * p.stageBytes) / 4),
      scratchAt((kAlign + p.phiBytes + p.stages * (p.stageBytes + p.plane)) / 4),
      l(mainLaunch(ctx, p, scratchAt)), kb(ctx.begin(l)), tid(kb.threadId()),
      bid(kb.blockId()), smem(l.shared(0)),
      ring(kb, l.shared(1), p.stages, /*arrivals=*/2 * 128 + 2) {
  colBase = kb.mul(bid, kb.idx(p.W));
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

/// This block's phi scale and its inverse: the largest |phi| of the slice,
/// over the warps through shared memory (a max: the same whatever the
/// order).
std::pair<Value, Value> WideMain::phiScale() {
  const int64_t W = p.W;
  Value mag = kb.loop(tid, kb.idx(p.N * W), kb.idx(384), {kb.i32(0)},
                      [&](Value e, ValueRange it) {
                        Value v = kb.load(l.arg("phi"), phiAtCol(kb.div(e, kb.idx(W)),
                                                                 kb.rem(e, kb.idx(W))));
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
    Value v0 = kb.mul(kb.toF32(kb.load(l.arg("phi"), phiAtCol(j, col))), scale);
    Value v1 = kb.mul(kb.toF32(kb.load(l.arg("phi"), phiAtCol(kb.add(j, kb.idx(1)), col))),
                      scale);
    kb.store(packF16x2(kb, v0, v1), smem,
             kb.add(phiAt, kb.div(coreMatrixByte(kb, col, j, 128, p.phiRow), kb.idx(4))));
  });
  kb.fenceProxyAsyncShared(); // the products read phi through the async proxy
}

/// Producer: thread 0 of warpgroup 0, paced against the other blocks.
void WideMain::produce() {
  kb.setMaxRegisters(kProducerRegs, /*increase=*/false);
  kb.when(kb.eq(tid, kb.idx(0)), [&] {
    Value steps = kb.mul(pairsOf(l.tokens()), kb.idx(2));
    WavePacer pacer(kb, kb.globalPtr(l.arg("progress"), kb.idx(0)),
                    kb.sharedPtr(l.shared(1), kb.idx(2 * p.stages)), kb.idx(p.slices),
                    kEpoch, /*lag=*/1);
    kb.loop(kb.idx(0), steps, kb.idx(1), [&](Value i) {
      pacer.before(i);
      ring.produce(i, [&](Value st) {
        Value at = stageAt(st), bar = ring.full(st);
        Value m0 = kb.indexToI32(kb.mul(i, kb.idx(kRows)));
        Value src = kb.mul(i, kb.idx(p.imageFloats));
        kb.mbarrierArriveExpectTx(bar, p.xBytes + p.image);
        for (int64_t b = 0; b < p.boxes; ++b)
          kb.tensorLoad2d(kb.sharedPtr(smem, kb.add(at, kb.idx(b * kBoxBytes / 4))),
                          l.arg("tmap16:x"),
                          kb.indexToI32(kb.add(colBase, kb.idx(64 * b))), m0, bar);
        kb.bulkCopy(kb.sharedPtr(smem, fplaneAt(st)), kb.globalPtr(l.arg("ghp"), src),
                    p.plane, bar);
        kb.bulkCopy(kb.sharedPtr(smem, kb.add(at, kb.idx(p.xBytes / 4))),
                    kb.globalPtr(l.arg("ghp"), kb.add(src, kb.idx(p.plane / 4))), p.rest, bar);
      });
      pacer.after(i);
    });
    pacer.finish(steps, steps);
  });
}

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

/// The pair's gx boxes go out by TMA once every thread wrote them; each
/// thread's accesses to the stages are done.
void WideMain::storePair(const WideConsumer &cs, const WidePair &pr) {
  kb.fenceProxyAsyncShared();
  kb.namedBarrier(cs.barrierId, 128);
  for (int64_t h = 0; h < 2; ++h) // this thread's accesses are done
    kb.mbarrierArrive(ring.empty(kb.add(pr.st0, kb.idx(h))));
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
      kb.storeFrom({total[b * N / 2 + q]}, l.arg("gphi"), phiAtCol(j, col));
    }
}

/// Consumer c takes boxes [first, first + nb) of every pair of steps: box
/// 0 with gphi's products, the others in a loop (unrolled, the JIT took
/// longer still).
void WideMain::consume(int64_t c, int64_t first, int64_t nb) {
  kb.setMaxRegisters(kConsumerRegs, /*increase=*/true);
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
  kb.when(cs.leader, [&] { kb.bulkWait(0, /*readOnly=*/false); });
  storeGphi(cs, total);
}

void WideMain::emit() {
  auto [scale, back] = phiScale();
  phiBack = back;
  stagePhi(scale);
  ring.init(); // the mbarriers, then every thread past the phi writes
  Value wg = kb.div(tid, kb.idx(128));
  kb.when(kb.eq(wg, kb.idx(0)), [&] { produce(); });
  kb.when(kb.eq(wg, kb.idx(1)), [&] { consume(0, 0, p.split); });
  kb.when(kb.eq(wg, kb.idx(2)), [&] { consume(1, p.split, p.boxes - p.split); });
}

} // namespace

bool mlir::mhc::projectBackwardIsWide(const KernelContext &ctx) {
  return planWide(ctx).has_value();
}

LogicalResult mlir::mhc::buildProjectBackwardWide(KernelContext &ctx) {
  const WidePlan p = *planWide(ctx);
  // LLVM -O1 (ptxas stays -O3): -O3 spends its extra compile time on
  // dead-store elimination over the 280 gphi stores and would push this,
  // the largest kernel, past a second of cold JIT, for under 1% of speed.
  ctx.llvmOptLevel = 1;
  declareProjectBackwardIO(ctx);
  // Images for whole pairs of steps (a last odd step's partner is zeros).
  ctx.buffer("ghp", DType::F32, BufferRole::Workspace,
             {p.imageFloats / kRows, (2 * kRows - 1) * p.imageFloats / kRows});
  ctx.buffer("progress", DType::F32, BufferRole::Workspace, {0, 1}); // an i32 counter
  WidePad(ctx, p).emit();
  WideMain(ctx, p).emit();
  return success();
}
