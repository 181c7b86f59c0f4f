//===- ForwardStagedLaunches.h - the staged forward's launches --*- C++ -*-===//
//
// The emitters of the staged projection forward's launches (ForwardStaged.cpp
// describes the kernel), shared by its files: the pack launches
// (ForwardStagedPack.cpp) and the partial launch, whose class StagedPartial
// is emitted by ForwardStagedPartial.cpp (the ring and the chunk loop),
// ForwardStagedLoads.cpp (x's loads and the seam's expand) and
// ForwardStagedProducts.cpp (the tensor-core products).
//
//===----------------------------------------------------------------------===//

#ifndef MHC_CODEGEN_KERNELS_PROJECT_FORWARDSTAGEDLAUNCHES_H
#define MHC_CODEGEN_KERNELS_PROJECT_FORWARDSTAGEDLAUNCHES_H

#include "builder/BulkRing.h"
#include "kernels/project/ForwardStagedPlan.h"
#include "kernels/project/Project.h"

namespace mlir::mhc {

/// The mma.sync layout's 16-byte piece (chunk c, pair j, n-tile nt, lane)
/// of every part: parts[p][e], e the piece's 8 columns (rows past N are
/// zeros). pieceLoads and piecePartsOf are its two halves, for a fill that
/// loads a chunk ahead: the f32 values it is made of (phi's 8 columns of the
/// piece's row, clamped to N - 1, then the weight's 8 where the spec has
/// one), and the parts from them.
SmallVector<SmallVector<Value>> pieceParts(KernelBuilder &kb, const StagedPlan &sp, Value phi,
                                           Value weight, Value c, Value j, Value nt, Value lane);
SmallVector<Value> pieceLoads(KernelBuilder &kb, const StagedPlan &sp, Value phi,
                              Value weight, Value c, Value j, Value nt, Value lane);
SmallVector<SmallVector<Value>> piecePartsOf(KernelBuilder &kb, const StagedPlan &sp,
                                             ArrayRef<Value> loads, Value nt, Value lane);
/// The pack launch for wgmma's B layout: per chunk, k-step s and part p, an
/// [N, 16] tile in core matrices (n-block nb, k-half kb) of 8 rows x 16
/// bytes at byte nb * 256 + kb * 128 (the descriptors' SBO and LBO). Logical
/// k 8 kb + e of step s = 2j + h is physical column 32j + 4h + 2kb +
/// 8(e / 2) + e % 2 of the chunk (the permutation of x's A fragments).
/// One thread per (chunk, pair j, row n) reads the row's 32 columns.
void emitWgmmaPack(KernelContext &ctx, const StagedPlan &sp);
/// The pack launch for the mma.sync layout: one thread per 16-byte piece of
/// the packed parts.
void emitMmaSyncPack(KernelContext &ctx, const StagedPlan &sp);
/// The partial launch: its parameters, grid and shared ring (kStages chunk
/// buffers and their full/empty mbarriers), then its body.
void emitStagedPartial(KernelContext &ctx, const StagedPlan &p);

/// The partial launch's body: a block per (token block, split) streams its
/// range of chunks of packed B through the ring and multiplies its tokens'
/// x by them. The members up to bulkMode emit IR as they are initialised,
/// in declaration order.
class StagedPartial {
public:
  StagedPartial(const StagedPlan &p, LaunchBuilder &l, KernelBuilder &kb);
  void emit();

private:
  using Rows = SmallVector<SmallVector<Value>>;
  /// A chunk's loads, a chunk ahead with prefetch: x's 16 bytes per (row,
  /// pair) and, for the seam's expand, f's per (row, pair) and the bias'
  /// per pair, raw (the expand converts them).
  /// With the seam's expand and one token block, also the f32 values of
  /// the thread's pieces of the chunk's phi w (pieceLoads, `fillRounds` x 8
  /// or 16), loaded with its x (a chunk ahead) so that the fill, after the
  /// expand, does not wait for them. (Carried through the loop they cost
  /// the plans with two m-tiles spills on sm_100a; those load in the fill.)
  struct ChunkLoads {
    /// With realignX, xs holds each (row, pair)'s first aligned granule
    /// until realignRows and xsNext the second (never carried: appendTo).
    Rows xs, fs, xsNext;
    SmallVector<Value> bias, pieces;
    void appendTo(SmallVector<Value> &values) const;
  };
  ChunkLoads chunkLoadsFrom(ValueRange values) const;
  void issueCopy(Value i, Value st);
  /// Item q of a chunk's fill: piece (pair j, n-tile nt, lane pl).
  struct PieceIndex {
    Value j, nt, pl;
  };
  int64_t fillItems() const;
  int64_t fillRounds() const;
  /// f32 values per piece: phi's 8, then the weight's 8 where it has one.
  int64_t pieceWidth() const { return p.hasWeight ? 16 : 8; }
  PieceIndex pieceIndex(Value q);
  Value weightArg();
  bool piecesAhead() const { return p.inlineSplit() && p.expand; }
  SmallVector<Value> loadPieces(Value i);
  void fillChunk(Value i, Value st, ArrayRef<Value> pieces);
  void locateRows();
  void locateShifts();
  void locateParityRows(Value first, int64_t tileStride);
  Value loadParityRow(int64_t r, Value at);
  void locateHalfShifts();
  Value loadHalfRow(Value first, Value fifth, Value bits);
  void stageMixing();
  Value chunkColumn(Value i);
  Value laneColumn(Value col, int64_t j);
  ChunkLoads loadChunk(Value i);
  void loadXAnyK(Value chunk, ChunkLoads &in);
  void realignRows(Value i, ChunkLoads &in);
  void expandRows(Value col, ChunkLoads &in);
  SmallVector<Value> firstLoopValues();
  SmallVector<Value> emitKLoop(ArrayRef<Value> init);
  SmallVector<Value> emitChunk(Value i, ValueRange it, Value zero);
  Value acquireChunk(Value i, const ChunkLoads &in);
  void onLiveWarps(SmallVector<Value> &values, function_ref<void()> body);
  Rows pairWords(const Rows &xs, int64_t j, MutableArrayRef<Value> next);
  void wgmmaProducts(const Rows &xs, Value ringBase, MutableArrayRef<Value> next);
  void mmaSyncProducts(const Rows &xs, Value ringBase, MutableArrayRef<Value> next);
  Value bOffset(Value ringBase, int64_t j, int64_t part, int64_t nt);
  void storePartials(ArrayRef<Value> result);

  const StagedPlan &p;
  LaunchBuilder &l;
  KernelBuilder &kb;
  ProjectSplitK sk;
  Value count; // chunks in the block's range
  Value ring;
  BulkRing bulk;
  /// One token block: the block fills its buffers from phi w (no copies).
  Value small, bulkMode;
  /// [mt * 2 + h]: token g + 8h of m-tile mt (2g + h with parityRows), the
  /// same clamped to M - 1 (for loads), and its x row's offset.
  SmallVector<Value> rows, loadRows, xRow;
  /// realignX: [r] as above, the lane's x offset rounded down to 16 bytes,
  /// the step to its second granule (8, or 0 where the row is aligned) and
  /// the row's shift in words, bit by bit.
  SmallVector<Value> xRowAligned, xNextStep, shiftBit0, shiftBit1;
  /// halfRows: xRowAligned (to 4 bytes) and xNextStep (to the fifth word:
  /// 8 or 6 elements) as above, and the i32 funnel shift (16 or 0 bits;
  /// also realignX's at 2-byte rows).
  SmallVector<Value> halfShift;
  /// parityRows: [r] as xRow, past token 0's first xUnit elements for the
  /// odd rows where M = 1 (locateParityRows).
  SmallVector<Value> xRowSplit;
  /// Whether the warp has a token below M (its first row).
  Value liveWarp;
  /// The seam's expand: post and P of the block's tokens in shared memory,
  /// [tokensPerBlock, n + n^2] (stageMixing).
  Value mixing;
};

} // namespace mlir::mhc

#endif // MHC_CODEGEN_KERNELS_PROJECT_FORWARDSTAGEDLAUNCHES_H
