//===- BackwardWgmma.cpp - n = 6, 8 projection backward on wgmma ----------===//
//
// gx = gh phi + (2/K) gms x and gphi = gh^T x for bf16 x, tf32 mode, no
// weight, on sm_90a, where the mma.sync kernel (BackwardMma.cpp) is
// bound by the tensor issue and its per-step structure (n = 8: 80 mixing
// rows per token).
//
// Launch "pad" writes each 64-token step's gh as one image that a single
// bulk copy moves into shared memory: gh's bf16 hi and lo parts (hi =
// rn(gh), lo = rn(gh - hi): 2^-17 of gh), each as core matrices of 8
// tokens x 8 rows of gh (16-byte token rows), then gms as f32. The one
// layout is both D's A (K-major over gh's rows) and gphi's B (N-major).
//
// Launch "main": a block per (128 columns, token share), one per SM.
// Warpgroup 0 gives its registers up (setmaxnreg) and its thread 0 fills a
// ring of four stages: per step the two 64-column x tiles by TMA tensor
// copies (128-byte rows, 128-byte swizzle) and the gh image by one bulk
// copy, all completing on the stage's "full" mbarrier. Warpgroups 1 and 2
// take alternate steps (ping-pong: one's epilogue overlaps the other's
// products; with an even ring a stage always serves the same consumer),
// each for all 128 columns, every operand from shared memory:
//   D [64 tokens x 128 columns] = gh phi: bf16 wgmma m64n128k16, three
//     passes (hi hi, hi lo, lo hi: finer than tf32) over N/16 k-steps;
//     phi's hi and lo parts resident (written once per block, K-major);
//   gphi^T [128 columns x N] += x^T gh: bf16 m64nNk16, A = the x tiles as
//     TMA wrote them (M-major, swizzled), B = gh's parts (N-major); the
//     accumulators stay in registers across the consumer's steps;
//   gx = D + (2/K) gms x into a swizzled tile, stored by TMA tensor stores
//     (rows past M dropped) while the other consumer multiplies.
// At the end each consumer's gphi^T goes to [2 shares, N, K] partials,
// which the "partials_final" launch sums in order: deterministic. The
// producers of a wave of blocks keep within a step of each other through
// a progress counter (a scheduling hint; see "Pacing" below).
//
// It runs close to a plain TMA copy of its tile pattern; the designs it
// replaced and those tried and not kept are in docs/design/project.md.
//
//===----------------------------------------------------------------------===//

#include "builder/BulkRing.h"
#include "builder/Streams.h"
#include "builder/WavePacer.h"
#include "kernels/project/Fragments.h"
#include "kernels/project/Project.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"

#include <cmath>

using namespace mlir;
using namespace mlir::mhc;
using ::mhc::BufferRole;
using ::mhc::DType;

namespace {

constexpr int64_t kTokens = 64;   // tokens per step (wgmma's M)
constexpr int64_t kCols = 128;    // columns per block
constexpr int64_t kMaxStages = 8; // even: a stage always serves one consumer
constexpr int64_t kTile = 8192;   // bytes of a [64][64] bf16 tile
constexpr int64_t kAlign = 1024;  // the swizzle's period in shared memory
// Pacing (WavePacer): the blocks of one wave (smCount() consecutive block
// ids) issue their steps in loose lockstep: a producer issues step i once
// every block of its wave has issued step i - kPaceLag - 1, the counters
// zeroed by the pad launch. Faster at every shape measured; epochs of
// two steps or two steps of slack were slower (docs/design/project.md).
constexpr int64_t kPaceLag = 1;

/// The kernel's plan: the gh image and the shared-memory layout (bytes),
/// the ring's depth, the grid and its waves.
struct WgmmaPlan {
  int64_t N, K;
  int64_t planeBytes;  // one part of a step's gh
  int64_t imageBytes;  // both parts, then gms
  int64_t imageFloats; // (N + 1) per token
  int64_t cmRow;       // 8 tokens of a plane
  int64_t stageBytes, phiPlane, phiBytes;
  int64_t phiRow;   // 8 rows of phi
  int64_t outBytes; // per consumer, two tiles
  int64_t stages, slices, shares, blocks, sms, waves;
};

/// Token shares for a grid of `slices` x shares blocks, one per SM. The
/// kernel streams at the memory system's rate, so a last wave that leaves
/// SMs idle costs less than a wave (the others' blocks get the bandwidth),
/// while each block's head and tail and each share's partials (N x K per
/// consumer) cost their time. The choice is the fewest shares whose last
/// wave leaves at most 5% of the block slots idle (measured against
/// tokenShares' model in docs/design/project.md).
int64_t streamShares(double slots, int64_t slices) {
  for (int64_t s = 1; s < 64; ++s) {
    double waves = slices * s / slots;
    if ((std::ceil(waves) - waves) / std::ceil(waves) <= 0.05)
      return s;
  }
  return 64;
}

WgmmaPlan planWgmma(const KernelContext &ctx) {
  WgmmaPlan p;
  const int64_t N = ctx.N(), K = ctx.K();
  p.N = N, p.K = K;
  p.planeBytes = kTokens * N * 2;
  p.imageBytes = 2 * p.planeBytes + kTokens * 4;
  p.imageFloats = p.imageBytes / 4;
  p.cmRow = N / 8 * 128;
  p.stageBytes = (2 * kTile + p.imageBytes + kAlign - 1) / kAlign * kAlign;
  p.phiPlane = N * kCols * 2, p.phiBytes = 2 * p.phiPlane;
  p.phiRow = kCols / 8 * 128;
  p.outBytes = 2 * 2 * kTile;
  p.stages = kMaxStages;
  while (p.stages > 2 && kAlign + p.phiBytes + p.stages * p.stageBytes + p.outBytes +
                                 16 * p.stages >
                             LaunchBuilder::sharedLimit(ctx.spec.arch))
    p.stages -= 2;
  p.slices = K / kCols;
  p.shares = streamShares(double(ctx.smCount()), p.slices);
  p.blocks = p.slices * p.shares, p.sms = ctx.smCount();
  p.waves = (p.blocks + p.sms - 1) / p.sms;
  return p;
}

/// Launch "pad": each step's gh image (both bf16 parts as core matrices,
/// then gms), and block 0 zeroes the main launch's pacing counters.
void buildPadLaunch(KernelContext &ctx, const WgmmaPlan &p) {
  const int64_t N = p.N, planeBytes = p.planeBytes, imageFloats = p.imageFloats;
  LaunchBuilder &l = ctx.launch("pad");
  l.param("gh").param("gms").param("ghp").param("progress").param("M").block(256)
      .grid({kTokens, 0});
  KernelBuilder kb = ctx.begin(l);
  Value M = l.tokens(), bid = kb.blockId();
  kb.when(kb.eq(bid, kb.idx(0)), [&] { // the main launch's pacing counters
    WavePacer::clear(kb, l.arg("progress"), p.waves, 256);
  });
  Value zero = kb.f32(0.0);
  Value last = kb.sub(M, kb.idx(1)), image = kb.mul(bid, kb.idx(imageFloats));
  auto ghAt = [&](Value r, Value j) { // gh[r][j], 0 past M
    Value g = kb.load(l.arg("gh"), kb.add(kb.mul(kb.min(r, last), kb.idx(N)), j));
    return kb.select(kb.lt(r, M), g, zero);
  };
  // A word (two rows of gh) per item and part.
  kb.loop(kb.threadId(), kb.idx(kTokens * N / 2), kb.idx(256), [&](Value e) {
    Value tok = kb.div(e, kb.idx(N / 2)), j = kb.mul(kb.rem(e, kb.idx(N / 2)), kb.idx(2));
    Value r = kb.add(kb.mul(bid, kb.idx(kTokens)), tok);
    SmallVector<Value> words = bf16PartWords(kb, ghAt(r, j), ghAt(r, kb.add(j, kb.idx(1))));
    Value at = kb.add(image, kb.div(coreMatrixByte(kb, tok, j, p.cmRow, 128), kb.idx(4)));
    for (int64_t part = 0; part < 2; ++part)
      kb.store(words[part], l.arg("ghp"), kb.add(at, kb.idx(part * planeBytes / 4)));
  });
  kb.loop(kb.threadId(), kb.idx(kTokens), kb.idx(256), [&](Value tok) {
    Value r = kb.add(kb.mul(bid, kb.idx(kTokens)), tok);
    Value s = kb.select(kb.lt(r, M), kb.load(l.arg("gms"), kb.min(r, last)), zero);
    kb.store(s, l.arg("ghp"), kb.add(image, kb.add(kb.idx(2 * planeBytes / 4), tok)));
  });
}

/// A consumer warpgroup's values: its index c (0, 1), its thread ct, warp
/// w and lane (g, t), its rows r0 (+ 8) of a fragment, its named barrier
/// and gx's output tiles.
struct WgmmaConsumer {
  Value c, ct, w, lane, g, t, r0, zero, twoOverK, leader, barrierId, out;
};

/// Launch "main": the block's slice, share and shared-memory layout, and
/// the emission of its parts (phi, the producer, the consumers' steps).
class WgmmaMain {
public:
  WgmmaMain(KernelContext &ctx, const WgmmaPlan &p, LaunchBuilder &l);
  void emit();

private:
  Value stageAt(Value st);
  void stagePhi();
  void produce();
  WgmmaConsumer consumerValues();
  SmallVector<Value> products(const WgmmaConsumer &cs, Value at, Value img,
                              SmallVector<Value> &acc);
  void storeGx(const WgmmaConsumer &cs, ArrayRef<Value> d, Value at, Value img, Value m0);
  void storePartials(const WgmmaConsumer &cs, ArrayRef<Value> total);
  void consume();

  const WgmmaPlan &p;
  LaunchBuilder &l;
  KernelBuilder kb;
  Value M, tid, bid, smem;
  BulkRing ring;
  Value slice, share, colBase, per, s0, count, phiAt, outAt, wg;
};

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

/// A step's products from stage `at` (gh's image at `img`): D = gh phi
/// (returned) and gphi^T += x^T gh into `acc`; waits for D.
SmallVector<Value> WgmmaMain::products(const WgmmaConsumer &cs, Value at, Value img,
                                       SmallVector<Value> &acc) {
  const int64_t N = p.N, planeBytes = p.planeBytes, cmRow = p.cmRow, phiRow = p.phiRow;
  kb.wgmmaFence();
  // D = gh phi: hi hi, hi lo, lo hi.
  SmallVector<Value> d(64, cs.zero);
  for (int64_t pass = 0; pass < 3; ++pass)
    for (int64_t s = 0; s < N / 16; ++s) {
      Value a = kb.wgmmaDescriptor(
          smem, kb.add(img, kb.idx(((pass == 2) * planeBytes + s * 256) / 4)), 128, cmRow);
      Value b = kb.wgmmaDescriptor(
          smem, kb.add(phiAt, kb.idx(((pass == 1) * p.phiPlane + s * 2 * phiRow) / 4)),
          phiRow, 128);
      kb.wgmmaBf16Shared(d, a, b, /*transA=*/false, /*transB=*/false);
    }
  kb.wgmmaCommit();
  // gphi^T += x^T gh, 16 tokens at a time.
  for (int64_t kk = 0; kk < kTokens / 16; ++kk)
    for (int64_t mt = 0; mt < 2; ++mt)
      for (int64_t part = 0; part < 2; ++part) {
        Value a = kb.wgmmaDescriptorSwizzled(
            smem, kb.add(at, kb.idx((mt * kTile + kk * 2048) / 4)), kTile, 1024);
        Value b = kb.wgmmaDescriptor(
            smem, kb.add(img, kb.idx((part * planeBytes + kk * 2 * cmRow) / 4)), cmRow, 128);
        kb.wgmmaBf16Shared(MutableArrayRef<Value>(acc).slice(mt * N / 2, N / 2), a, b,
                           /*transA=*/true, /*transB=*/true);
      }
  kb.wgmmaCommit();
  kb.wgmmaWait(1); // D
  return d;
}

/// gx = D + (2/K) gms x through swizzled tiles (the x tiles' layout: no
/// bank conflicts), then two tensor stores; the previous step's stores
/// have read the tiles first.
void WgmmaMain::storeGx(const WgmmaConsumer &cs, ArrayRef<Value> d, Value at, Value img,
                        Value m0) {
  Type bf16x2 = VectorType::get({2}, kb.b.getBF16Type());
  kb.when(cs.leader, [&] { kb.bulkWait(0, /*readOnly=*/true); });
  kb.namedBarrier(cs.barrierId, 128);
  for (int64_t h = 0; h < 2; ++h) {
    // Token m = r0 + 8h (m % 8 = g): the 16-byte pieces of its 128-byte
    // rows are permuted by m % 8.
    Value m = kb.add(cs.r0, kb.idx(8 * h));
    Value gm = kb.mul(kb.load(smem, kb.add(img, kb.add(kb.idx(2 * p.planeBytes / 4), m))),
                      cs.twoOverK);
    for (int64_t i8 = 0; i8 < 16; ++i8) {
      Value chunk = arith::XOrIOp::create(kb.b, kb.loc, kb.idx(i8 % 8), cs.g);
      Value byte = kb.add(kb.add(kb.idx(i8 / 8 * kTile), kb.mul(m, kb.idx(128))),
                          kb.add(kb.mul(chunk, kb.idx(16)), kb.mul(cs.t, kb.idx(4))));
      Value f = kb.div(byte, kb.idx(4));
      Value xv = kb.toF32(LLVM::LoadOp::create(kb.b, kb.loc, bf16x2,
                                               kb.sharedPtr(smem, kb.add(at, f)), 4));
      Value v0 = kb.fma(gm, kb.extract(xv, 0), d[4 * i8 + 2 * h]);
      Value v1 = kb.fma(gm, kb.extract(xv, 1), d[4 * i8 + 2 * h + 1]);
      Value o = kb.vector({kb.toType(v0, kb.b.getBF16Type()),
                           kb.toType(v1, kb.b.getBF16Type())});
      LLVM::StoreOp::create(kb.b, kb.loc, o, kb.sharedPtr(smem, kb.add(cs.out, f)), 4);
    }
  }
  kb.fenceProxyAsyncShared();
  kb.namedBarrier(cs.barrierId, 128);
  kb.when(cs.leader, [&] {
    for (int64_t tile = 0; tile < 2; ++tile)
      kb.tensorStore2d(l.arg("tmap:gx"), kb.sharedPtr(smem, kb.add(cs.out, kb.idx(tile * kTile / 4))),
                       kb.indexToI32(kb.add(colBase, kb.idx(64 * tile))),
                       kb.indexToI32(m0));
    kb.bulkCommit();
  });
}

/// Each consumer's gphi^T goes to partials of its own (share, c):
/// gphi[j][colBase + col] from accumulator q of m-tile mt, pairs of
/// columns of gphi^T being pairs of rows j, j + 1 of gphi.
void WgmmaMain::storePartials(const WgmmaConsumer &cs, ArrayRef<Value> total) {
  const int64_t N = p.N, K = p.K;
  Value base = kb.mul(kb.add(kb.mul(share, kb.idx(2)), cs.c), kb.idx(N * K));
  for (int64_t mt = 0; mt < 2; ++mt)
    for (int64_t q = 0; q < N / 2; ++q) {
      Value col = kb.add(kb.idx(64 * mt + 8 * ((q / 2) % 2)), cs.r0);
      Value j = kb.add(kb.idx(8 * (q / 4) + q % 2), kb.mul(cs.t, kb.idx(2)));
      kb.store(total[mt * N / 2 + q], l.arg("partials"),
               kb.add(base, kb.add(kb.mul(j, kb.idx(K)), kb.add(colBase, col))));
    }
}

/// Consumers: warpgroups 1 and 2, steps c, c + 2, ...
void WgmmaMain::consume() {
  kb.setMaxRegisters(232, /*increase=*/true);
  WgmmaConsumer cs = consumerValues();
  // Accumulator i of a m64nN fragment: row 16w + g + 8((i / 2) % 2),
  // column 8(i / 4) + 2t + i % 2.
  SmallVector<Value> init(p.N, cs.zero); // gphi^T, two 64-column m-tiles
  SmallVector<Value> total = kb.loop(
      cs.c, count, kb.idx(2), init, [&](Value i, ValueRange it) {
        SmallVector<Value> acc(it.begin(), it.end());
        Value at = stageAt(ring.wait(i));
        Value img = kb.add(at, kb.idx(2 * kTile / 4));
        Value m0 = kb.mul(kb.add(s0, i), kb.idx(kTokens));
        SmallVector<Value> d = products(cs, at, img, acc);
        storeGx(cs, d, at, img, m0);
        kb.wgmmaWait(0); // gphi: the stage is free
        ring.release(i, cs.lane);
        return acc;
      });
  kb.when(cs.leader, [&] { kb.bulkWait(0, /*readOnly=*/false); });
  storePartials(cs, total);
}

void WgmmaMain::emit() {
  stagePhi();
  ring.init(); // the mbarriers, then every thread past the phi writes
  wg = kb.div(tid, kb.idx(128));
  kb.when(kb.eq(wg, kb.idx(0)), [&] { produce(); });
  kb.when(kb.lt(kb.idx(0), wg), [&] { consume(); });
}

} // namespace

bool mlir::mhc::projectBackwardIsWgmma(const KernelContext &ctx) {
  const ::mhc::KernelSpec &s = ctx.spec;
  // n = 6 and 8 (N = 48, 80): N a multiple of 16 (D's k-steps) and the
  // accumulators (D 64, gphi^T N per thread) fit the consumers' registers.
  return s.arch == "sm_90a" && s.tf32 && s.act == DType::BF16 &&
         !s.hasWeight && (s.n == 6 || s.n == 8) && ctx.K() % kCols == 0;
}

LogicalResult mlir::mhc::buildProjectBackwardWgmma(KernelContext &ctx) {
  const WgmmaPlan p = planWgmma(ctx);
  const int64_t N = p.N, K = p.K;
  declareProjectBackwardIO(ctx);
  ctx.buffer("ghp", DType::F32, BufferRole::Workspace,
             {p.imageFloats / kTokens, (kTokens - 1) * p.imageFloats / kTokens});
  ctx.buffer("partials", DType::F32, BufferRole::Workspace, {0, 2 * p.shares * N * K});
  ctx.buffer("progress", DType::F32, BufferRole::Workspace, {0, p.waves}); // i32 counters
  buildPadLaunch(ctx, p);
  {
    LaunchBuilder &l = ctx.launch("main");
    l.param("tmap:x").param("tmap:gx").param("ghp").param("phi").param("partials")
        .param("progress").param("M").block(384).grid({0, p.slices * p.shares})
        .sharedF32((kAlign + p.phiBytes + p.stages * p.stageBytes + p.outBytes) / 4, 128)
        .sharedI64(2 * p.stages + 1) // the mbarriers, then the producer's pacing flag
        .minBlocksPerSM(1);
    WgmmaMain(ctx, p, l).emit();
  }
  // Consumer-wise partials: summing the two consumers in shared memory
  // would hand data between warpgroups past a block barrier, which
  // compute-sanitizer's racecheck reports as hazards in warpgroups that
  // have used 128-thread named barriers (a correct CUDA C repro: bar.sync
  // 1/2, 128 in each warpgroup, shared writes, __syncthreads, reads).
  emitColumnSumFinal(ctx, "partials", N * K, {{"gphi", N * K}}, 2 * p.shares);
  return success();
}
