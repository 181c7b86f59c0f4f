//===- BackwardWide.h - the one-wave backward's parts -----------*- C++ -*-===//
//
// What the one-wave projection backward's files share (BackwardWide.cpp:
// the plan and the build; BackwardWideF16.cpp: the f16 planes' scales;
// BackwardWidePad.cpp: launch "pad"; BackwardWideMain.cpp,
// BackwardWideConsumer.cpp, BackwardWidePhases.cpp and
// BackwardWidePieces.cpp: launch "main").
//
//===----------------------------------------------------------------------===//

#ifndef MHC_CODEGEN_KERNELS_PROJECT_BACKWARDWIDE_H
#define MHC_CODEGEN_KERNELS_PROJECT_BACKWARDWIDE_H

#include "builder/BulkRing.h"
#include "builder/KernelContext.h"

#include <array>
#include <string>

namespace mlir::mhc {
struct WavePacer;
} // namespace mlir::mhc

namespace mlir::mhc::wide {

constexpr int64_t kRows = 16;              // tokens per step (a box's rows)
constexpr int64_t kBoxBytes = kRows * 128; // 64 bf16 columns x 16 tokens
constexpr int64_t kMaxBoxes = 8;   // gphi^T accumulators: 4 boxes per consumer
constexpr int64_t kMinStages = 4;  // even: the consumers take steps in pairs
constexpr int64_t kMaxStages = 8;
constexpr int64_t kMaxSlots = 4;   // phase maps' staging (WidePlan::phases)
constexpr int64_t kUnpackers = 96; // the producer warpgroup's warps 1 .. 3
// A staged map's box in granules of 64 elements (one TMA copy per map and
// step; docs/design/project.md measured 8 to 128).
constexpr int64_t kStagedGranule = 64;
static_assert(64 % kStagedGranule == 0, "a block's first column (64 per box) starts a granule");
constexpr int64_t kAlign = 1024;   // the swizzle's period in shared memory
constexpr int64_t kEpoch = 2;      // pacing: steps per epoch (fastest measured)
// Registers per thread after setmaxnreg: 128 x (24 + 2 x 240) = 64512; a
// producer warpgroup that copies phase maps' rows (WidePlan) takes 56, and
// its consumers 224 (no spill at four maps).
constexpr int64_t kProducerRegs = 24, kConsumerRegs = 240;
constexpr int64_t kPiecesProducerRegs = 56, kPiecesConsumerRegs = 224;

/// Bytes of one part of a step's gh image: 16 tokens x N 2-byte values.
inline int64_t planeBytes(int64_t N) { return kRows * N * 2; }
/// Bytes of one step's gh image: the f16 plane (gh scaled per token), the
/// bf16 hi and lo planes, then gms and the token's scale back (f32 each).
inline int64_t imageBytes(int64_t N) { return 3 * planeBytes(N) + 2 * kRows * 4; }

/// The kernel's plan: the boxes per block and the ring's depth, which
/// shared memory decides, and the layouts that follow (bytes).
struct WidePlan {
  int64_t N, K;
  bool tail;     // the last block has columns past K
  int64_t piece; // the rows' alignment: 16 bytes (x and gx by TMA boxes),
                 // or 8 or 4 (x by phase maps, gx by st.global pieces)
  bool pieces() const { return piece < 16; }
  // Rows not 16-byte aligned: a step's 16 tokens as P = 16 / piece phases,
  // tokens r, r + P, ... (R = 16 / P of them) in tensor map r, whose rows
  // are 16-byte aligned. Map 0 lands in the boxes' rows 0 .. R - 1; maps
  // 1 .. P - 1, which start `shift` elements before their tokens, land in
  // a staging slot, an unswizzled box each (stagedWidth columns: a slice
  // plus the shift, in granules), and the producer warpgroup copies them
  // into rows R .. 15 (BackwardWidePhases.cpp). A step's box row q holds
  // token P (q % R) + q / R: the pad writes gh's image in that order.
  int64_t phases = 1, phaseRows = kRows;
  int64_t stagedWidth = 0, stagedBoxBytes = 0, slotBytes = 0;
  int64_t slots = 0, stagingAt = 0; // staging slots, their first byte past phi
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

/// The token (from the step's first) that row `row` of a step's boxes and
/// gh image holds (WidePlan::phases).
Value stepToken(KernelBuilder &kb, const WidePlan &p, Value row);

// The f16 planes' scales and words (BackwardWideF16.cpp).
/// The power of two that brings a value whose |bits| (f32 bits without the
/// sign) are `mag` into [2^14, 2^15): the f32 scale and its inverse. A NaN
/// or infinity gets 1 (it propagates as it is); zero and the tiniest values
/// 2^126, so that the inverse stays a normal number.
std::pair<Value, Value> f16Scale(KernelBuilder &kb, Value mag);
/// |v|'s f32 bits (NaN above infinity above every finite value).
Value magnitudeBits(KernelBuilder &kb, Value v);
/// The largest of an i32 over `lanes` aligned lanes (a power of two).
Value laneGroupMax(KernelBuilder &kb, Value v, int lanes);
/// Two values as f16 (round to nearest even) in one word, the first low.
Value packF16x2(KernelBuilder &kb, Value v0, Value v1);
/// bf16 e of a word (two bf16), as f32.
Value unpackBf16(KernelBuilder &kb, Value word, int64_t e);

/// The launch parameter of x's phase map r (WidePlan::phases), and for r >
/// 0 the same tokens in boxes of one row and one granule (exact at the
/// row's end).
std::string phaseMap(const WidePlan &p, int64_t r);
std::string phaseEdgeMap(const WidePlan &p, int64_t r);

/// Launch "pad" (BackwardWidePad.cpp): each step's image of gh in ghp; block
/// 0 zeroes launch "main"'s pacing counter.
void emitWidePad(KernelContext &ctx, const WidePlan &p);

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

/// A piece of a step's boxes: its column in the block's slice, its box
/// row (token stepToken(row) of the step), and its byte in the stage (in
/// the 128-byte swizzle).
struct WidePiece {
  Value col, row, byte;
};

/// Launch "main": the block's column slice and shared-memory layout, and
/// the emission of its parts (phi's scale and f16 plane, the producer:
/// BackwardWideMain.cpp; the consumers' pairs of steps:
/// BackwardWideConsumer.cpp; where the rows are not 16-byte aligned, x by
/// phase maps: BackwardWidePhases.cpp, and gx in pieces:
/// BackwardWidePieces.cpp).
class WideMain {
public:
  WideMain(KernelContext &ctx, const WidePlan &p);
  void emit();

private:
  Value pairsOf(Value m);
  Value stageAt(Value st);
  Value fplaneAt(Value st);
  Value phiAtCol(Value j, Value col);
  Value loadPhi(Value j, Value col);
  std::pair<Value, Value> phiScale();
  void stagePhi(Value scale);
  WavePacer makePacer();
  void issueStep(Value i, Value st);
  void produce();
  WidePiece rowPiece(Value item, int64_t row0, int64_t rows, int64_t bytes, int64_t firstBox);
  Value slotAt(Value slot);
  Value slotBar(Value slot, bool free);
  void issueStaged(Value i, bool edge);
  void unpackStep(Value u, Value j, Value st);
  void producePhases();
  void storePieces(const WideConsumer &cs, const WidePair &pr);
  void storeRowPiece(Value stage, const WidePiece &pc, Value rowAt, int64_t bytes, Value ok);
  void storePiece(Value stage, Value byte, Value at, int64_t bytes, Value ok);
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
  const ::mhc::KernelSpec &spec;
  const int64_t fplaneAt0, scratchAt; // floats past phiAt; floats
  LaunchBuilder &l;
  KernelBuilder kb;
  Value tid, bid, smem;
  BulkRing ring;
  Value colBase, lane, warp, phiAt, phiBack;
  Value pacerCounter, pacerFlag, pacerPeers; // the producer's (makePacer)
};

} // namespace mlir::mhc::wide

#endif // MHC_CODEGEN_KERNELS_PROJECT_BACKWARDWIDE_H
