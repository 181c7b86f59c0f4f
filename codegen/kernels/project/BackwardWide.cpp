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

struct Wide {
  int64_t boxes, slices, stages, stageBytes;
  int64_t cols() const { return 64 * boxes; }
};

/// Bytes of one part of a step's gh image: 16 tokens x N 2-byte values.
int64_t planeBytes(int64_t N) { return kRows * N * 2; }
/// Bytes of one step's gh image: the f16 plane (gh scaled per token), the
/// bf16 hi and lo planes, then gms and the token's scale back (f32 each).
int64_t imageBytes(int64_t N) { return 3 * planeBytes(N) + 2 * kRows * 4; }

} // namespace

static std::optional<Wide> wideShape(const KernelContext &ctx) {
  const ::mhc::KernelSpec &s = ctx.spec;
  if (!(s.arch == "sm_90a" && s.tf32 && s.act == DType::BF16 && !s.hasWeight &&
        (s.n == 6 || s.n == 8)))
    return std::nullopt;
  const int64_t N = ctx.N(), K = ctx.K(), sms = ctx.smCount();
  if (K % 64)
    return std::nullopt;
  const int64_t total = K / 64;
  for (int64_t b = (total + sms - 1) / sms; b <= kMaxBoxes; ++b) {
    if (total % b)
      continue;
    // A stage: the x boxes and the image past its f16 plane, which goes
    // to a ring of its own (consecutive steps' planes adjacent: one B
    // operand for a pair of steps).
    int64_t rest = imageBytes(N) - planeBytes(N);
    int64_t stageBytes = (b * kBoxBytes + rest + kAlign - 1) / kAlign * kAlign;
    int64_t room = LaunchBuilder::sharedLimit(s.arch) - kAlign - 64 * b * N * 2 - 64 -
                   8 * (2 * kMaxStages + 1);
    int64_t stages = std::min(kMaxStages, room / (stageBytes + planeBytes(N))) / 2 * 2;
    if (stages < kMinStages)
      return std::nullopt;
    return Wide{b, total / b, stages, stageBytes};
  }
  return std::nullopt;
}

bool mlir::mhc::projectBackwardIsWide(const KernelContext &ctx) {
  return wideShape(ctx).has_value();
}

/// The power of two that brings a value whose |bits| (f32 bits without the
/// sign) are `mag` into [2^14, 2^15): the f32 scale and its inverse. A NaN
/// or infinity gets 1 (it propagates as it is); zero and the tiniest values
/// 2^126, so that the inverse stays a normal number.
static std::pair<Value, Value> f16Scale(KernelBuilder &kb, Value mag) {
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
static Value magnitudeBits(KernelBuilder &kb, Value v) {
  Value bits = arith::BitcastOp::create(kb.b, kb.loc, kb.b.getI32Type(), kb.toF32(v));
  return kb.andi(bits, kb.i32(0x7fffffff));
}

/// The largest of an i32 over `lanes` aligned lanes (a power of two).
static Value laneGroupMax(KernelBuilder &kb, Value v, int lanes) {
  Type f32 = kb.b.getF32Type(), i32 = kb.b.getI32Type();
  for (int off = lanes / 2; off >= 1; off /= 2) {
    Value other = kb.shuffleXor(arith::BitcastOp::create(kb.b, kb.loc, f32, v), off);
    v = kb.max(v, arith::BitcastOp::create(kb.b, kb.loc, i32, other).getResult());
  }
  return v;
}

/// Two values as f16 (round to nearest even) in one word, the first low.
static Value packF16x2(KernelBuilder &kb, Value v0, Value v1) {
  Type f16 = kb.b.getF16Type();
  Value v = kb.vector({kb.toType(v0, f16), kb.toType(v1, f16)});
  Value word = LLVM::BitcastOp::create(kb.b, kb.loc, kb.b.getI32Type(), v);
  return arith::BitcastOp::create(kb.b, kb.loc, kb.b.getF32Type(), word);
}

LogicalResult mlir::mhc::buildProjectBackwardWide(KernelContext &ctx) {
  const Wide sh = *wideShape(ctx);
  const int64_t N = ctx.N(), K = ctx.K(), W = sh.cols(), boxes = sh.boxes;
  const int64_t stages = sh.stages, stageBytes = sh.stageBytes;
  const int64_t plane = planeBytes(N);             // one part of a step's gh
  const int64_t image = imageBytes(N), imageFloats = image / 4;
  const int64_t rest = image - plane;              // the stage's part of it
  // In a stage, past the x boxes: bf16 hi, lo, gms, back (bytes).
  const int64_t xBytes = boxes * kBoxBytes;
  const int64_t gmsAt = 2 * plane, backAt = gmsAt + kRows * 4;
  const int64_t cmRow = N / 8 * 128;               // 8 tokens of a plane
  const int64_t phiBytes = W * N * 2, phiRow = W / 8 * 128; // 8 rows of phi
  const int64_t split = (boxes + 1) / 2;           // consumer 1's first box

  // LLVM -O1 (ptxas stays -O3): -O3 spends its extra compile time on
  // dead-store elimination over the 280 gphi stores and would push this,
  // the largest kernel, past a second of cold JIT, for under 1% of speed.
  ctx.llvmOptLevel = 1;
  declareProjectBackwardTmaIO(ctx);
  // Images for whole pairs of steps (a last odd step's partner is zeros).
  ctx.buffer("ghp", DType::F32, BufferRole::Workspace,
             {imageFloats / kRows, (2 * kRows - 1) * imageFloats / kRows});
  ctx.buffer("progress", DType::F32, BufferRole::Workspace, {0, 1}); // an i32 counter


  {
    // A block per pair of steps: gh's 32 rows read coalesced into shared
    // memory (rows padded to N + 1 floats: no bank conflicts), the two
    // images built there, then written out in 16-byte pieces (they are
    // adjacent in ghp).
    LaunchBuilder &l = ctx.launch("pad");
    const int64_t rowF = N + 1, imgAt = 2 * kRows * rowF, scalesAt = imgAt + 2 * imageFloats;
    l.param("gh").param("gms").param("ghp").param("progress").param("M").block(256)
        .grid({2 * kRows, 0}).sharedF32(scalesAt + 2 * kRows, 16);
    KernelBuilder kb = ctx.begin(l);
    Value M = l.tokens(), bid = kb.blockId(), tid = kb.threadId();
    Value sm = l.shared(0);
    kb.when(kb.eq(bid, kb.idx(0)), [&] { WavePacer::clear(kb, l.arg("progress"), 1, 256); });
    Value zero = kb.f32(0.0);
    Value first = kb.mul(bid, kb.idx(2 * kRows));
    Value valid = kb.mul(kb.sub(kb.min(M, kb.add(first, kb.idx(2 * kRows))), first), kb.idx(N));
    kb.loop(tid, kb.idx(2 * kRows * N), kb.idx(256), [&](Value e) { // 0 past M
      Value g = kb.load(l.arg("gh"), kb.add(kb.mul(first, kb.idx(N)), kb.min(e, kb.sub(valid, kb.idx(1)))));
      Value at = kb.add(kb.mul(kb.div(e, kb.idx(N)), kb.idx(rowF)), kb.rem(e, kb.idx(N)));
      kb.store(kb.select(kb.lt(e, valid), g, zero), sm, at);
    });
    kb.barrier();
    auto imageAt = [&](Value tok) { // floats: token tok's step image in sm
      return kb.add(kb.idx(imgAt), kb.mul(kb.div(tok, kb.idx(kRows)), kb.idx(imageFloats)));
    };
    // The token's scale: 8 threads per token, N / 8 values each.
    {
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
        kb.store(back, sm, kb.add(at, kb.idx((plane + backAt) / 4)));
        Value g = kb.load(l.arg("gms"), kb.min(r, kb.sub(M, kb.idx(1))));
        kb.store(kb.select(kb.lt(r, M), g, zero), sm, kb.add(at, kb.idx((plane + gmsAt) / 4)));
      });
    }
    kb.barrier();
    // A word (two rows of gh) per item and part: f16 of the scaled values,
    // bf16 hi and lo parts of the values; a warp takes 32 tokens of one
    // pair of rows.
    kb.loop(tid, kb.idx(2 * kRows * N / 2), kb.idx(256), [&](Value e) {
      Value tok = kb.rem(e, kb.idx(2 * kRows)), j = kb.mul(kb.div(e, kb.idx(2 * kRows)), kb.idx(2));
      Value row = kb.mul(tok, kb.idx(rowF));
      Value g0 = kb.load(sm, kb.add(row, j)), g1 = kb.load(sm, kb.add(row, kb.add(j, kb.idx(1))));
      Value scale = kb.load(sm, kb.add(kb.idx(scalesAt), tok));
      SmallVector<Value> words = {packF16x2(kb, kb.mul(g0, scale), kb.mul(g1, scale))};
      SmallVector<Value> p0 = bf16Parts(kb, g0, Value(), kb.boolean(true), 2);
      SmallVector<Value> p1 = bf16Parts(kb, g1, Value(), kb.boolean(true), 2);
      for (int64_t part = 0; part < 2; ++part)
        words.push_back(arith::BitcastOp::create(kb.b, kb.loc, kb.b.getF32Type(),
                                                 kb.packBf16x2(p0[part], p1[part])));
      Value to = kb.add(imageAt(tok),
                        kb.div(coreMatrixByte(kb, kb.rem(tok, kb.idx(kRows)), j, cmRow, 128), kb.idx(4)));
      for (int64_t p = 0; p < 3; ++p)
        kb.store(words[p], sm, kb.add(to, kb.idx(p * plane / 4)));
    });
    kb.barrier();
    Value out = kb.mul(bid, kb.idx(2 * imageFloats));
    kb.loop(kb.mul(tid, kb.idx(4)), kb.idx(2 * imageFloats), kb.idx(4 * 256), [&](Value e) {
      kb.vstore(kb.vload(sm, kb.add(kb.idx(imgAt), e), 4), l.arg("ghp"), kb.add(out, e));
    });
  }

  {
    LaunchBuilder &l = ctx.launch("main");
    const int64_t fplaneAt0 = (phiBytes + stages * stageBytes) / 4; // floats past phiAt
    const int64_t scratchAt = (kAlign + phiBytes + stages * (stageBytes + plane)) / 4;
    l.param("tmap16:x").param("tmap16:gx").param("ghp").param("phi").param("gphi")
        .param("progress").param("M").block(384).grid({0, sh.slices})
        .sharedF32(scratchAt + 16, 128)
        .sharedI64(2 * stages + 1) // the mbarriers, then the producer's pacing flag
        .minBlocksPerSM(1);
    KernelBuilder kb = ctx.begin(l);
    Value tid = kb.threadId(), bid = kb.blockId();
    Value smem = l.shared(0);
    // A stage is free once every consumer thread is done with it (each
    // arrives for its own accesses: compute-sanitizer's racecheck sees no
    // order through a named barrier and one thread's arrival) and both
    // consumers' TMA stores have read it (their leaders arrive again).
    BulkRing ring(kb, l.shared(1), stages, /*arrivals=*/2 * 128 + 2);
    Value colBase = kb.mul(bid, kb.idx(W));
    Value lane = kb.rem(tid, kb.idx(32)), warp = kb.div(tid, kb.idx(32));
    // Steps in pairs (the producer fills a last odd step's partner with
    // zeros past M).
    auto pairsOf = [&](Value m) {
      return kb.div(kb.add(m, kb.idx(2 * kRows - 1)), kb.idx(2 * kRows));
    };

    Value phiAt = alignedFloatIndex(kb, smem, kAlign); // floats
    auto stageAt = [&](Value st) {         // floats
      return kb.add(phiAt, kb.add(kb.idx(phiBytes / 4), kb.mul(st, kb.idx(stageBytes / 4))));
    };
    auto fplaneAt = [&](Value st) { // floats: step's f16 plane
      return kb.add(phiAt, kb.add(kb.idx(fplaneAt0), kb.mul(st, kb.idx(plane / 4))));
    };
    auto phiAtCol = [&](Value j, Value col) {
      return kb.add(kb.mul(j, kb.idx(K)), kb.add(colBase, col));
    };

    // This block's phi scale: the largest |phi| of the slice, over the
    // warps through shared memory (a max: the same whatever the order).
    Value mag = kb.loop(tid, kb.idx(N * W), kb.idx(384), {kb.i32(0)},
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
    auto [phiScale, phiBack] = f16Scale(kb, blockMag);

    // phi as D^T's A: [W columns][N rows], K-major core matrices (8 columns
    // x 8 rows of phi, 16-byte column rows), 8 rows of phi per phiRow bytes.
    kb.loop(tid, kb.idx(N / 2 * W), kb.idx(384), [&](Value e) {
      Value j = kb.mul(kb.div(e, kb.idx(W)), kb.idx(2)), col = kb.rem(e, kb.idx(W));
      Value v0 = kb.mul(kb.toF32(kb.load(l.arg("phi"), phiAtCol(j, col))), phiScale);
      Value v1 = kb.mul(kb.toF32(kb.load(l.arg("phi"), phiAtCol(kb.add(j, kb.idx(1)), col))),
                        phiScale);
      kb.store(packF16x2(kb, v0, v1), smem,
               kb.add(phiAt, kb.div(coreMatrixByte(kb, col, j, 128, phiRow), kb.idx(4))));
    });
    kb.fenceProxyAsyncShared(); // the products read phi through the async proxy
    ring.init(); // the mbarriers, then every thread past the phi writes

    Value wg = kb.div(tid, kb.idx(128));
    // Producer: thread 0 of warpgroup 0.
    kb.when(kb.eq(wg, kb.idx(0)), [&] {
      kb.setMaxRegisters(kProducerRegs, /*increase=*/false);
      kb.when(kb.eq(tid, kb.idx(0)), [&] {
        Value steps = kb.mul(pairsOf(l.tokens()), kb.idx(2));
        WavePacer pacer(kb, kb.globalPtr(l.arg("progress"), kb.idx(0)),
                        kb.sharedPtr(l.shared(1), kb.idx(2 * stages)), kb.idx(sh.slices),
                        kEpoch, /*lag=*/1);
        kb.loop(kb.idx(0), steps, kb.idx(1), [&](Value i) {
          pacer.before(i);
          ring.produce(i, [&](Value st) {
            Value at = stageAt(st), bar = ring.full(st);
            Value m0 = kb.indexToI32(kb.mul(i, kb.idx(kRows)));
            Value src = kb.mul(i, kb.idx(imageFloats));
            kb.mbarrierArriveExpectTx(bar, xBytes + image);
            for (int64_t b = 0; b < boxes; ++b)
              kb.tensorLoad2d(kb.sharedPtr(smem, kb.add(at, kb.idx(b * kBoxBytes / 4))),
                              l.arg("tmap16:x"),
                              kb.indexToI32(kb.add(colBase, kb.idx(64 * b))), m0, bar);
            kb.bulkCopy(kb.sharedPtr(smem, fplaneAt(st)), kb.globalPtr(l.arg("ghp"), src),
                        plane, bar);
            kb.bulkCopy(kb.sharedPtr(smem, kb.add(at, kb.idx(xBytes / 4))),
                        kb.globalPtr(l.arg("ghp"), kb.add(src, kb.idx(plane / 4))), rest, bar);
          });
          pacer.after(i);
        });
        pacer.finish(steps, steps);
      });
    });

    // Consumer c takes boxes [first, first + nb) of every pair of steps.
    auto consume = [&](int64_t c, int64_t first, int64_t nb) {
      kb.setMaxRegisters(kConsumerRegs, /*increase=*/true);
      Value ct = kb.rem(tid, kb.idx(128));
      Value w = kb.div(ct, kb.idx(32));
      Value g = kb.div(lane, kb.idx(4)), t = kb.rem(lane, kb.idx(4));
      Value zero = kb.f32(0.0);
      Value twoOverK = kb.f32(2.0 / static_cast<double>(K));
      Value leader = kb.eq(ct, kb.idx(0));
      Value barrierId = kb.i32(c + 1);

      // Accumulator i of a m64nN fragment: row 16w + g + 8((i / 2) % 2),
      // column 8(i / 4) + 2t + i % 2.
      SmallVector<Value> init(nb * N / 2, zero); // gphi^T, a m-tile per box
      SmallVector<Value> total = kb.loop(
          kb.idx(0), pairsOf(l.tokens()), kb.idx(1), init, [&](Value k, ValueRange it) {
            SmallVector<Value> acc(it.begin(), it.end());
            Value i0 = kb.mul(k, kb.idx(2));
            Value st0 = ring.wait(i0);
            ring.wait(kb.add(i0, kb.idx(1))); // in stage st0 + 1 (an even ring)
            Value at[2] = {stageAt(st0), stageAt(kb.add(st0, kb.idx(1)))};
            Value fplane = fplaneAt(st0);
            Value phiHere = kb.opaque(phiAt); // phi's descriptors: per use
            // The previous pair's stores have had this pair's wait (and
            // products) to read their stages: the leader's second arrival.
            auto releasePrevious = [&] {
              kb.when(kb.andi(leader, kb.lt(kb.idx(0), k)), [&] {
                kb.bulkWait(0, /*readOnly=*/true);
                for (int64_t h = 0; h < 2; ++h)
                  kb.mbarrierArrive(ring.empty(ring.stage(kb.sub(i0, kb.idx(2 - h)))));
              });
            };
            if (nb == 0)
              releasePrevious();
            // D^T [64 columns x 32 tokens] = phi^T gh^T a box at a time
            // (its accumulators beside gphi^T's must fit the registers),
            // then gx over that box.
            auto products = [&](Value box, bool withGphi) { // box: in this consumer's range
              kb.wgmmaFence();
              SmallVector<Value> d(16, zero);
              Value boxPhi = kb.add(phiHere, kb.mul(box, kb.idx(1024 / 4)));
              for (int64_t s = 0; s < N / 16; ++s) {
                Value a = kb.wgmmaDescriptor(
                    smem, kb.add(boxPhi, kb.idx((first * 1024 + s * 2 * phiRow) / 4)), phiRow, 128);
                Value bd = kb.wgmmaDescriptor(smem, kb.add(fplane, kb.idx(s * 256 / 4)), 128,
                                              cmRow);
                kb.wgmmaF16Shared(d, a, bd);
              }
              // gphi^T += x^T gh: bf16, gh's hi and lo parts, 16 tokens of
              // each step.
              if (withGphi)
                for (int64_t b = 0; b < nb; ++b)
                  for (int64_t h = 0; h < 2; ++h)
                    for (int64_t part = 0; part < 2; ++part) {
                      Value a = kb.wgmmaDescriptorSwizzled(
                          smem, kb.add(at[h], kb.idx((first + b) * kBoxBytes / 4)), kBoxBytes,
                          1024);
                      Value bd = kb.wgmmaDescriptor(
                          smem, kb.add(at[h], kb.idx((xBytes + part * plane) / 4)), cmRow, 128);
                      kb.wgmmaBf16Shared(MutableArrayRef<Value>(acc).slice(b * N / 2, N / 2), a,
                                         bd, /*transA=*/true, /*transB=*/true);
                    }
              kb.wgmmaCommit();
              if (withGphi)
                releasePrevious();
              kb.wgmmaWait(0); // the boxes are free to overwrite
              return d;
            };
            // gx over the box in place, by ldmatrix / stmatrix .trans: matrix
            // i of step h holds tokens 8(i / 2) .. + 7 of the step and
            // columns 16w + 8(i % 2) .. + 7 of the box, so lane (g, t) gets
            // accumulators q = 8h + 4(i / 2) + 2(i % 2) + e (tokens
            // 8(i / 2) + 2t + e). Lane l addresses row l % 8 of matrix
            // l / 8; the 16-byte pieces of a token row are permuted by the
            // token mod 8.
            Value li = kb.div(lane, kb.idx(8)), rho = kb.rem(lane, kb.idx(8));
            Value piece = arith::XOrIOp::create(
                kb.b, kb.loc, kb.add(kb.mul(w, kb.idx(2)), kb.rem(li, kb.idx(2))), rho);
            Value rowByte = kb.add(
                kb.mul(kb.add(kb.mul(kb.div(li, kb.idx(2)), kb.idx(8)), rho), kb.idx(128)),
                kb.mul(piece, kb.idx(16)));
            Type f32 = kb.b.getF32Type();
            auto unpack = [&](Value word, int64_t e) { // bf16 e of a word, as f32
              Value bits = e == 0 ? kb.mul(word, kb.i32(1 << 16))
                                  : kb.andi(word, kb.i32(static_cast<int32_t>(0xffff0000u)));
              return arith::BitcastOp::create(kb.b, kb.loc, f32, bits).getResult();
            };
            // Box 0 with gphi's products, the others in a loop (unrolled,
            // the JIT took longer still).
            auto boxGx = [&](Value box, bool withGphi) {
              SmallVector<Value> d = products(box, withGphi);
              for (int64_t h = 0; h < 2; ++h) {
                Value img = kb.add(at[h], kb.idx(xBytes / 4));
                Value gm[4], back[4]; // tokens 8(mq / 2) + 2t + mq % 2
                for (int64_t mq = 0; mq < 4; ++mq) {
                  Value m = kb.add(kb.mul(t, kb.idx(2)), kb.idx(8 * (mq / 2) + mq % 2));
                  gm[mq] = kb.mul(kb.load(smem, kb.add(img, kb.add(kb.idx(gmsAt / 4), m))),
                                  twoOverK);
                  back[mq] = kb.mul(kb.load(smem, kb.add(img, kb.add(kb.idx(backAt / 4), m))),
                                    phiBack);
                }
                Value p = kb.bytePtr(kb.sharedPtr(smem, at[h]),
                                     kb.add(rowByte, kb.mul(kb.add(box, kb.idx(first)),
                                                            kb.idx(kBoxBytes))));
                SmallVector<Value> x = kb.ldmatrixX4Trans(p), out;
                for (int64_t i = 0; i < 4; ++i) {
                  Value v[2];
                  for (int64_t e = 0; e < 2; ++e) {
                    int64_t q = 8 * h + 4 * (i / 2) + 2 * (i % 2) + e, mq = 2 * (i / 2) + e;
                    v[e] = kb.fma(gm[mq], unpack(x[i], e), kb.mul(d[q], back[mq]));
                  }
                  out.push_back(kb.packBf16x2(v[0], v[1]));
                }
                kb.stmatrixX4Trans(p, out);
              }
            };
            if (nb > 0)
              boxGx(kb.idx(0), /*withGphi=*/true);
            if (nb > 1)
              kb.loop(kb.idx(1), kb.idx(nb), kb.idx(1), [&](Value box) { boxGx(box, false); });
            kb.fenceProxyAsyncShared();
            kb.namedBarrier(barrierId, 128);
            for (int64_t h = 0; h < 2; ++h) // this thread's accesses are done
              kb.mbarrierArrive(ring.empty(kb.add(st0, kb.idx(h))));
            kb.when(leader, [&] {
              for (int64_t h = 0; h < 2; ++h) {
                Value m0 = kb.indexToI32(kb.mul(kb.add(i0, kb.idx(h)), kb.idx(kRows)));
                for (int64_t b = first; b < first + nb; ++b)
                  kb.tensorStore2d(l.arg("tmap16:gx"),
                                   kb.sharedPtr(smem, kb.add(at[h], kb.idx(b * kBoxBytes / 4))),
                                   kb.indexToI32(kb.add(colBase, kb.idx(64 * b))), m0);
              }
              kb.bulkCommit();
            });
            return acc;
          });
      kb.when(leader, [&] { kb.bulkWait(0, /*readOnly=*/false); });

      // gphi[j][col] from accumulator q of box b: pairs of columns of
      // gphi^T are pairs of rows j, j + 1 of gphi.
      Value r0 = kb.add(kb.mul(w, kb.idx(16)), g);
      for (int64_t b = 0; b < nb; ++b)
        for (int64_t q = 0; q < N / 2; ++q) {
          Value col = kb.add(kb.idx(64 * (first + b) + 8 * ((q / 2) % 2)), r0);
          Value j = kb.add(kb.idx(8 * (q / 4) + q % 2), kb.mul(t, kb.idx(2)));
          kb.storeFrom({total[b * N / 2 + q]}, l.arg("gphi"), phiAtCol(j, col));
        }
    };
    kb.when(kb.eq(wg, kb.idx(1)), [&] { consume(0, 0, split); });
    kb.when(kb.eq(wg, kb.idx(2)), [&] { consume(1, split, boxes - split); });
  }
  return success();
}
