//===- BackwardMmaPlan.h - the mma.sync backward's plan ---------*- C++ -*-===//
//
// Everything about the mma.sync projection backward that is a constant of
// the spec (tiles, warps, token shares, the ring's stages), computed apart
// from the IR that BackwardMma.cpp emits from it.
//
//===----------------------------------------------------------------------===//

#ifndef MHC_CODEGEN_KERNELS_PROJECT_BACKWARDMMAPLAN_H
#define MHC_CODEGEN_KERNELS_PROJECT_BACKWARDMMAPLAN_H

#include "builder/KernelContext.h"

namespace mlir::mhc {

// Steps (8 tokens each) per run of the two-level sums (precise mode).
constexpr int64_t kRun = 8;
// Pacing of the producer warps (WavePacer): steps per epoch, epochs of lag.
constexpr int64_t kEpoch = 3, kPaceLag = 1;
// rowWords: a row's stride in the stage (4-byte words). 33: the 32 words
// of a warp's 64 columns and one more (the 33rd at 2-byte rows), so that
// rows 4u + t start t banks apart and lane (g, t)'s reads of word 4g + w
// are conflict-free.
constexpr int64_t kRowWords = 33;
// gxGranules at 2-byte rows: gx's rows in the stage (words), the row's
// column 0 at word kGxPad (granule 0's image reads up to 4 words before
// it). 40 words a row: lane (g, t)'s 16-byte writes to row 4u + t are
// conflict-free in each 8-lane phase (granule slots 2t + g mod 8), and its
// reads of word 4g + 4 - ceil(r / 2) + i, r = ((2t + u) K) % 8 at odd K,
// too (ceil(r / 2) takes every residue mod 4 over t; at 37, 4-way).
constexpr int64_t kGxPad = 4, kGxRow = 40;

/// The kernel's plan, all constants of the spec: tiles and warps, the
/// token split, the stage layout of the ring and its depth.
struct MmaPlan {
  int64_t N, K;
  bool hasW, precise, splitX, roundX;
  int64_t rSteps, parts; // 8-row steps of N; tf32 parts of phi and gh
  int64_t T;             // k-tiles (16 columns) per warp
  int warps, blocksPerSM, threads;
  int64_t actBytes;
  bool staged, paced; // block ring by bulk copies; with a producer warp
  int64_t laneCols, blockCols, slices, width, shares;
  // Any K (issue 35): x's rows aligned to xAlign bytes (16 where K % 8 ==
  // 0; at 8 the block ring copies each row from the 16-byte boundary below
  // it, MmaMain::issueBlockStep); a lane's columns are loaded and stored in pieces of colPiece
  // elements, each masked at K where colPiece < laneCols (K % laneCols !=
  // 0). At 2-byte rows (odd K, 2-byte x; the per-warp ring) x goes as the
  // aligned 4-byte words that hold a lane's columns, laneCols / 2 + 1 of
  // them, read back funnel-shifted by the row's half-word (wordCopy:
  // MmaMain::copyXWords). rowWords (laneCols 8, 4-byte rows; 2-byte rows
  // with gxGranules): a warp copies each row's words in one request
  // (MmaMain::copyRowWords). gxGranules (per-warp ring, laneCols 8, tf32,
  // 2- and 4-byte rows): gx goes as aligned 16-byte granules
  // (MmaMain::storeGxStaged, storeGxGranules).
  int64_t xAlign, colPiece;
  bool wordCopy, rowWords, gxGranules;
  // A stage of the ring (floats), x's pieces (per-warp ring) and rows
  // (block ring), gh's row stride and the phi fragments' slots.
  int64_t unit, copies, xFloats, ghFloats, ghPieces, stageFloats, phiFloats;
  int64_t depth, rowBytes, ghStride;
  // The paced producers' wave counters.
  int64_t waveBlocks, waves, paceTokens;
  int64_t nAcc() const { return T * rSteps; }
  // gxGranules' lanes trade words through the stage (odd K), else by shuffles.
  bool gxStaged() const { return gxGranules && xAlign == 2; }
};


MmaPlan planMma(const KernelContext &ctx);

} // namespace mlir::mhc

#endif // MHC_CODEGEN_KERNELS_PROJECT_BACKWARDMMAPLAN_H
