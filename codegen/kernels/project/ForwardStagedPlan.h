//===- ForwardStagedPlan.h - the staged forward's plan -----------*- C++ -*-===//
//
// Everything about the staged projection forward (ForwardStaged.cpp) that
// is a constant of the spec: chunk width, bf16 parts, tiles, blocks per SM,
// the split over K, computed apart from the IR emitted from it.
//
//===----------------------------------------------------------------------===//

#ifndef MHC_CODEGEN_KERNELS_PROJECT_FORWARDSTAGEDPLAN_H
#define MHC_CODEGEN_KERNELS_PROJECT_FORWARDSTAGEDPLAN_H

#include "builder/KernelContext.h"

#include <optional>

namespace mlir::mhc {

constexpr int kWarps = 8;
constexpr int64_t kStages = 3;

/// How a spec's staged forward is tiled, fixed before anything is emitted:
/// SQ k-steps of 16 columns per chunk, P bf16 parts of phi w, the tiles of
/// a warp, the blocks per SM and the split over K.
struct StagedPlan {
  int64_t N, K;
  int64_t sq, parts, nTiles;
  int blocksPerSM;
  int64_t mTiles = 1; // m-tiles (16 tokens each) per warp
  /// Warpgroup products (sm_90a): each group of four warps multiplies
  /// m-tiles of 64 tokens by B straight from the ring.
  bool wgmma = false;
  bool precise, hasWeight;
  /// The layer seam's expand (buildProjectForwardExpand): x is layer l's,
  /// and the partial computes x_next = P^T x + post (f + bias) where it
  /// loads x, stores it and multiplies it instead.
  bool expand = false, hasBias = false;
  int64_t n = 0, C = 0;
  /// Elements of x, and of phi / weight, that one access may move: the
  /// rows' alignment (projectRowAlignBytes) over the element size, at most
  /// 16 bytes. Below 8 (2-byte x) where K % 8 != 0 ("Any K").
  int64_t xUnit = 8, paramUnit = 0;
  /// At 4-byte rows (xUnit == 2) a lane's 16 bytes per (row, pair) come as
  /// the two aligned 16-byte granules that hold them, shifted by the row's
  /// offset in words (realignX), instead of four 4-byte loads: at n <= 3
  /// (at most two n-tiles, two blocks per SM), whose products leave room
  /// for the second granules and the shifts' selects (docs/design/
  /// project.md, "Realigned x"). Not in "partial_few" (one token block:
  /// latency, not loads, bounds it), where it spilled.
  /// At 2-byte rows (odd K) the same granules, shifted by words and then
  /// by a half-word where the row starts at an odd element.
  bool realignX() const { return xUnit <= 2 && nTiles <= 2 && !fewOnly; }
  /// With wgmma (whose registers leave no room for second granules) at
  /// 4- or 8-byte rows, each m-tile's rows g are its even tokens and rows
  /// g + 8 its odd ones, so each load covers rows of one alignment: at
  /// 4-byte rows 16 bytes in two 8-byte loads (even) or loads of 4, 8 and 4
  /// bytes (odd) instead of four 4-byte loads; at 8-byte rows one 16-byte
  /// load (even) or two 8-byte loads (odd) instead of two 8-byte loads
  /// (parityRows; docs/design/project.md, "Rows by parity"). The mma.sync
  /// plans keep their loads at 4- and 8-byte rows (there it spilled at 128
  /// registers); at 2-byte rows they take the parity rows too: the even
  /// rows' words need no shift.
  bool parityRows() const { return (wgmma && xUnit < 8) || (xUnit == 1 && !realignX()); }
  /// At 2-byte rows (odd K; with parityRows its odd rows) a lane's 16 bytes
  /// come as the five aligned 4-byte words that hold them, funnel-shifted
  /// by a half-word where the row is not 4-byte aligned (loadHalfRow),
  /// instead of eight 2-byte loads.
  bool halfRows() const { return xUnit == 1 && !parityRows() && !realignX(); }
  ::mhc::SplitRule split;
  int64_t chunk() const { return 16 * sq; }
  /// Chunks of K, the last one partial where K % chunk() != 0 (any K): the
  /// pack pads it with zeros past K, the partial masks its x loads at K.
  int64_t chunks() const { return (K + chunk() - 1) / chunk(); }
  bool anyK() const { return K % chunk() != 0; }
  /// K rounded up to whole chunks: the packed B's columns.
  int64_t paddedK() const { return chunks() * chunk(); }
  int64_t pairs() const { return sq / 2; }
  /// Bytes of packed B per chunk: (sq / 2) pairs x parts x n-tiles x 512.
  int64_t chunkBytes() const { return (sq / 2) * parts * nTiles * 512; }
  int64_t tokensPerBlock() const { return 16 * mTiles * kWarps; }
  /// A call with one token block (M <= tokensPerBlock: a decode step, a
  /// small batch) reads each chunk of phi w in one block only, so the
  /// mma.sync path's partial launch splits it there itself and the pack
  /// launch is skipped: one launch fewer, and launches are most of what a
  /// call that small costs.
  bool inlineSplit() const { return !wgmma; }
  /// The mma.sync partial is built twice: "partial_few" for M up to
  /// fewTokens() (one token block, at least half of its warps without a
  /// token below M, which skip their products) and "partial" past it (no
  /// such check in its chunk loop: it cost the full blocks 0.2-0.6 us,
  /// docs/design/serve.md). fewOnly marks the first.
  bool fewOnly = false;
  int64_t fewTokens() const { return tokensPerBlock() / 2; }
  /// x is loaded a chunk ahead (see planStaged); the seam's expand loads
  /// x and f a chunk ahead too: loaded in the chunk, the expand waits for
  /// them at one block (8 warps) per SM.
  bool prefetch() const { return mTiles > 1 || expand; }
  /// The accumulators: 4 per (m-tile, n-tile).
  int64_t accs() const { return 4 * mTiles * nTiles; }
};

/// The plan of a spec the staged forward serves (bf16 x on sm_90+ whose
/// chunks fit the shared memory), else nullopt.
std::optional<StagedPlan> planStaged(const KernelContext &ctx);

/// Any K (ForwardStagedAnyK.cpp): `count` f32 values of phi / weight from
/// column `col` of the row at `rowOff`, 0 at columns >= K, in accesses of
/// p.paramUnit elements (the pack's loads where p.anyK()).
SmallVector<Value> loadStagedParams(KernelBuilder &kb, const StagedPlan &p,
                                    Value mem, Value rowOff, Value col,
                                    int64_t count);
/// Any K: the 8 x values (a vector of x's type) at `rowOff` + `col`, whose
/// columns are valid below `end` (K less the lane's column offset that
/// rowOff holds): 0 from there on, in accesses of p.xUnit elements; a
/// masked access reads the row's last unit instead.
Value loadStagedXMasked(KernelBuilder &kb, const StagedPlan &p, Value x,
                        Value rowOff, Value col, Value end);

/// The 32-bit words of a vector (of x's elements: two bf16 each, low half
/// first, the register layout of mma fragments), and the vector of `elem`
/// that words of x hold.
SmallVector<Value> xWords(KernelBuilder &kb, Value v);
Value xFromWords(KernelBuilder &kb, ArrayRef<Value> words, Type elem);

/// realignX: the 16 bytes that start `bit1 * 2 + bit0` words into the 32
/// bytes `first`, `second` (vectors of 8 of x's elements), and where
/// `halfBits` is given (i32: 16 or 0, at 2-byte rows) a half-word further.
Value shiftWords(KernelBuilder &kb, Value first, Value second, Value bit0,
                 Value bit1, Value halfBits = Value());

} // namespace mlir::mhc

#endif // MHC_CODEGEN_KERNELS_PROJECT_FORWARDSTAGEDPLAN_H
