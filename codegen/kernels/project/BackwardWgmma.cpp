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

#include "builder/Streams.h"
#include "kernels/project/BackwardWgmma.h"
#include "kernels/project/Project.h"

#include <cmath>

using namespace mlir;
using namespace mlir::mhc;
using namespace mlir::mhc::wgmma;
using ::mhc::BufferRole;
using ::mhc::DType;

namespace {

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

} // namespace

WgmmaPlan mlir::mhc::wgmma::planWgmma(const KernelContext &ctx) {
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
