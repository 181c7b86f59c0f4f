//===- BackwardMmaPlan.cpp - the mma.sync backward's plan -----------------===//

#include "kernels/project/BackwardMmaPlan.h"
#include "kernels/project/Fragments.h"
#include "kernels/project/Project.h"

#include "builder/LaunchBuilder.h"

#include <algorithm>
#include <numeric>

using namespace mlir;
using namespace mlir::mhc;
using ::mhc::DType;

namespace {

void planMode(const KernelContext &ctx, MmaPlan &p) {
  const ::mhc::KernelSpec &spec = ctx.spec;
  p.N = ctx.N();
  p.K = ctx.K();
  p.hasW = spec.hasWeight;
  p.precise = !spec.tf32;
  p.splitX = p.precise && spec.act == DType::F32;
  p.roundX = !p.precise && spec.act == DType::F32;
  p.rSteps = (p.N + 7) / 8;
  p.parts = p.precise ? 2 : 1;
  // For 2-byte activations on sm_90 (with gh rows whole 16-byte pieces,
  // N % 4 == 0) the stage is the block's (planRing).
  p.actBytes = ::mhc::byteWidth(spec.act);
  // Bulk copies need 16-byte aligned sources: rows 8- or 4-byte aligned
  // (K % 8 = 4, 2, 6) are copied from the 16-byte boundary below them
  // (issueBlockStep); rows 2-byte aligned take the per-warp ring.
  p.xAlign = projectRowAlignBytes(ctx, spec.act);
  p.staged = p.actBytes == 2 && spec.arch != "sm_80" && p.N % 4 == 0 &&
             p.xAlign >= 4;
  // `paced` staged specs add a producer warp (MmaMain::produce): on
  // sm_90a, those whose consumers fit the 136 registers of 160-thread
  // blocks at three per SM without spilling (no weight).
  p.paced = p.staged && !p.hasW && spec.arch == "sm_90a";
}

/// k-tiles per warp, warps per block and blocks per SM.
void planTiles(MmaPlan &p) {
  // T k-tiles (16 columns each) per warp: as many as keep gphi's mma
  // accumulators (twice that with precise mode's fp32 totals) near 48
  // registers. T = 4 gives each lane 8 contiguous columns: 16-byte loads.
  p.T = 4;
  while (p.T > 1 && p.T * p.rSteps * 4 * p.parts > 48)
    p.T /= 2;
  // Four warps per block and three blocks per SM; large n in precise mode
  // (n = 8: 80 accumulators) takes two warps and two blocks so that the
  // registers suffice.
  bool large = p.T * p.rSteps * 4 * p.parts > 48;
  p.warps = large ? 2 : 4;
  p.blocksPerSM = large ? 2 : 3;
  // Where the block ring leaves one k-tile per warp with tf32 (n = 8: ten
  // row steps) the warp's step is bound by shared-memory loads, one gh
  // fragment per mma: two k-tiles per warp share each (80 accumulators).
  // Four warps per block, three per SM, each stage's gh then serving 128
  // columns instead of 64 (every block reads all of gh from the L2); the
  // shapes measured are in docs/design/project.md.
  if (p.staged && p.T == 1 && !p.precise) {
    p.T = 2;
    p.warps = 4;
    p.blocksPerSM = 3;
  }
}

/// The grid: column slices of the block's columns and token shares.
void planGrid(const KernelContext &ctx, MmaPlan &p) {
  p.threads = 32 * (p.warps + (p.paced ? 1 : 0));
  p.laneCols = 2 * p.T;
  p.blockCols = p.warps * 16 * p.T;
  p.slices = (p.K + p.blockCols - 1) / p.blockCols;
  p.width = p.N * p.K + (p.hasW ? p.K : 0); // gphi, then gw
  // Token shares: a constant of the spec, so gphi's partial sums have the
  // same order on every run (tokenShares weighs the last wave's fill
  // against the final sum).
  p.shares = tokenShares(double(ctx.smCount() * p.blocksPerSM), p.slices,
                         2.0 * 32768 * p.K * p.actBytes, p.width);
}

/// The ring's stage layout and depth, within the shared-memory budget of
/// blocksPerSM blocks; the paced producers' counters.
void planRing(const KernelContext &ctx, MmaPlan &p) {
  const int64_t N = p.N;
  // Each warp streams its steps through a private ring of `depth` stages in
  // shared memory, filled by cp.async (no registers held by loads in
  // flight). A stage: x as [token 2t + u][copy c][lane] of `unit` bytes (a
  // lane reads back exactly what it copied; consecutive lanes, consecutive
  // 16 bytes: no bank conflicts), the step's gh rows [8, N] (read by every
  // lane: a warp sync after the wait), and gms of the 8 tokens. Tokens past
  // M and columns past K are zero-filled by the copies themselves.
  int64_t laneBytes = p.laneCols * p.actBytes;
  p.unit = std::min<int64_t>({16, laneBytes, p.xAlign});
  p.copies = laneBytes / p.unit;
  p.colPiece = std::gcd(p.laneCols, p.K & -p.K); // K & -K: K's lowest bit
  p.wordCopy = p.unit < 4;
  bool laneWords = !p.staged && p.actBytes == 2 && p.laneCols == 8;
  // gx in aligned 16-byte granules where a lane's 8 columns are 16 bytes of
  // a 2- or 4-byte aligned row: gx's 4-byte pieces made the L2 the bound
  // (3.4x the aligned C's write sectors at n = 1, C = 5121). In precise mode
  // only at 2-byte rows without weight or acc (n = 1, C = 5121 0.588 -> 0.723;
  // at 4-byte rows slower: C = 5122 0.834 -> 0.797), nor with a weight and
  // acc (8-212 bytes of spill). On the block ring (n = 2, 4) the same stores
  // measured slower at 8-byte rows and at one of two C at 4-byte rows.
  p.gxGranules = laneWords && p.xAlign <= 4 &&
                 (p.precise ? p.xAlign == 2 && !p.hasW && !ctx.spec.readsAcc()
                            : !(p.hasW && ctx.spec.readsAcc()));
  // 4-byte copies whose lanes hold consecutive words of one row (a request
  // of 4 sectors; a lane's own words spread one over 16): at 4-byte rows
  // (not in precise mode with acc, at 168 registers already: its spills
  // grew), at 2-byte rows with gx in granules and without acc (spills).
  p.rowWords = laneWords && (p.xAlign == 4 ? !(p.precise && ctx.spec.readsAcc())
                                           : p.xAlign == 2 && p.gxGranules && !ctx.spec.readsAcc());
  p.xFloats = 2 * 32 * (p.wordCopy ? p.laneCols / 2 + 1 : laneBytes / 4);
  if (p.rowWords)
    p.xFloats = 8 * kRowWords;
  if (p.gxStaged())
    p.xFloats = std::max<int64_t>(p.xFloats, 8 * kGxRow);
  p.ghFloats = (8 * N + 3) / 4 * 4;
  p.ghPieces = 2 * N; // 16-byte pieces
  p.stageFloats = p.xFloats + p.ghFloats + 8;
  p.phiFloats = p.warps * p.T * p.rSteps * p.parts * 128;
  int64_t budget =
      LaunchBuilder::sharedLimit(ctx.spec.arch) * 228 / 227 / p.blocksPerSM - 1024;
  // A power of two (the stage of a step is a mask of it), at most 8.
  p.depth = 2;
  while (p.depth < 8 &&
         (2 * p.depth * p.warps * p.stageFloats + p.phiFloats) * 4 <= budget)
    p.depth *= 2;
  // For `staged` specs the stage is the block's instead: one thread fills
  // it with bulk copies (the TMA engine: no per-lane copy instructions), x
  // as the block's 8 rows of blockCols columns (rows padded by 16 bytes, so
  // that the lanes reading one 16-byte column of different rows hit
  // different banks) and gh once for all warps; full/empty mbarriers hand
  // stages between that thread and the warps, as in
  // ForwardStaged.cpp (paced specs: a producer warp's thread).
  p.rowBytes = p.blockCols * p.actBytes + 16;
  // gh's row stride in the stage. With 2N % 32 == 0 (n = 6, 8) the lanes'
  // reads of D's B (row g, column t) and of gphi's B (row 2t + u, column g)
  // are 4-way bank conflicts, which bound n = 8: the block ring then copies
  // gh row by row into rows of S = 4 (mod 8) floats, 32 banks apart.
  // Otherwise one copy (n = 4's 2-way conflicts cost less than per-row
  // copies).
  p.ghStride = N;
  if (p.staged) {
    if (2 * N % 32 == 0)
      p.ghStride = N + (12 - N % 8) % 8;
    p.xFloats = 8 * p.rowBytes / 4;
    p.ghFloats = 8 * p.ghStride;
    p.stageFloats = p.xFloats + p.ghFloats;
    // Four stages: deeper rings measured no faster.
    p.depth = 4;
  }
  // The paced producers' counters: an i32 per wave of resident blocks,
  // counting issued steps in epochs of kEpoch. Pacing needs blocks that
  // live for several epochs: from 8 per share (M >= 1152 at six shares).
  p.waveBlocks = ctx.smCount() * p.blocksPerSM;
  p.waves = (p.slices * p.shares + p.waveBlocks - 1) / p.waveBlocks;
  p.paceTokens = 8 * 8 * kEpoch * p.shares;
}

} // namespace

MmaPlan mlir::mhc::planMma(const KernelContext &ctx) {
  MmaPlan p;
  planMode(ctx, p);
  planTiles(p);
  planGrid(ctx, p);
  planRing(ctx, p);
  return p;
}
