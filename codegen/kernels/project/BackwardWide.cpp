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
// Launch "pad" (BackwardWidePad.cpp) writes each step's image of gh; launch
// "main" (BackwardWideMain.cpp, BackwardWideConsumer.cpp) is a block per
// slice of columns in one wave, which walks every token.
//
// It is faster than the wgmma kernel where both apply (docs/design/project.md).
//
// At K % 64 != 0 the columns split into ceil(K / 64) boxes, the last
// block's past K: zeros on load (the next token's x in the phase maps'
// granules, which meets only phi masked to zero) and not stored, phi read
// masked at K, gphi stored below K. With 16-byte rows (K % 8 == 0) x and
// gx go by TMA (the tensor maps' bounds mask them); rows 8- or 4-byte
// aligned (K % 8 = 4, 2, 6: n = 6 at C % 4 != 0), which no tensor map
// describes token by token, come in by phase maps over every 2nd or 4th
// token (BackwardWidePhases.cpp) and go out in st.global pieces
// (BackwardWidePieces.cpp), through the same swizzled boxes.
//
//===----------------------------------------------------------------------===//

#include "kernels/project/BackwardWide.h"
#include "kernels/project/Project.h"

#include <optional>

using namespace mlir;
using namespace mlir::mhc;
using namespace mlir::mhc::wide;
using ::mhc::BufferRole;
using ::mhc::DType;

namespace {

/// The phase maps where the rows are not 16-byte aligned: a staged map's
/// box covers a slice plus up to 7 elements of shift in granules of
/// kStagedGranule elements (one TMA copy per map and step), every box on
/// 128 bytes.
void planPhases(WidePlan &p) {
  if (!p.pieces())
    return;
  p.phases = 16 / p.piece, p.phaseRows = kRows / p.phases;
  const int64_t cover = p.W + 8, G = kStagedGranule;
  p.stagedWidth = (cover + G - 1) / G * G;
  p.stagedBoxBytes = (p.phaseRows * p.stagedWidth * 2 + 127) / 128 * 128;
  p.slotBytes = (p.phases - 1) * p.stagedBoxBytes;
}

/// The plan for `boxes` boxes per block, if the stages fit.
std::optional<WidePlan> planBoxes(const KernelContext &ctx, int64_t boxes) {
  const int64_t N = ctx.N(), K = ctx.K();
  WidePlan p;
  p.N = N, p.K = K, p.boxes = boxes, p.W = 64 * boxes;
  p.piece = projectRowAlignBytes(ctx, DType::BF16);
  p.slices = ((K + 63) / 64 + boxes - 1) / boxes, p.tail = K % p.W != 0;
  p.plane = planeBytes(N), p.image = imageBytes(N), p.imageFloats = p.image / 4;
  // A stage: the x boxes and the image past its f16 plane, which goes
  // to a ring of its own (consecutive steps' planes adjacent: one B
  // operand for a pair of steps).
  p.rest = p.image - p.plane;
  p.stageBytes = (boxes * kBoxBytes + p.rest + kAlign - 1) / kAlign * kAlign;
  planPhases(p);
  int64_t room = LaunchBuilder::sharedLimit(ctx.spec.arch) - kAlign - 64 * boxes * N * 2 - 64 -
                 8 * (2 * kMaxStages + 1 + 2 * kMaxSlots) - kMaxSlots * p.slotBytes;
  p.stages = std::min(kMaxStages, room / (p.stageBytes + p.plane)) / 2 * 2;
  if (p.stages < kMinStages)
    return std::nullopt;
  if (p.pieces())
    p.slots = kMaxSlots;
  p.stagingAt = (p.W * N * 2 + p.stages * (p.stageBytes + p.plane) + 127) / 128 * 128;
  p.xBytes = boxes * kBoxBytes;
  p.gmsAt = 2 * p.plane, p.backAt = p.gmsAt + kRows * 4;
  p.cmRow = N / 8 * 128;
  p.phiBytes = p.W * N * 2, p.phiRow = p.W / 8 * 128;
  p.split = (boxes + 1) / 2;
  return p;
}

/// The fewest boxes per block (at most kMaxBoxes) that split the columns
/// evenly into one wave, if its stages fit; at K % 64 != 0 (K >= 64, rows
/// at least 4-byte aligned: K even) the fewest that cover them in one wave.
std::optional<WidePlan> planWide(const KernelContext &ctx) {
  const ::mhc::KernelSpec &s = ctx.spec;
  if (!(s.arch == "sm_90a" && s.tf32 && s.act == DType::BF16 && !s.hasWeight &&
        (s.n == 6 || s.n == 8)))
    return std::nullopt;
  const int64_t K = ctx.K(), sms = ctx.smCount();
  const int64_t total = (K + 63) / 64, fewest = (total + sms - 1) / sms;
  if (K % 64) {
    if (K % 2 || K < 64)
      return std::nullopt;
    for (int64_t b = fewest; b <= kMaxBoxes; ++b)
      if (std::optional<WidePlan> p = planBoxes(ctx, b))
        return p;
    return std::nullopt;
  }
  for (int64_t b = fewest; b <= kMaxBoxes; ++b)
    if (total % b == 0)
      return planBoxes(ctx, b);
  return std::nullopt;
}

} // namespace

Value wide::stepToken(KernelBuilder &kb, const WidePlan &p, Value row) {
  if (p.phases == 1)
    return row;
  return kb.add(kb.mul(kb.rem(row, kb.idx(p.phaseRows)), kb.idx(p.phases)),
                kb.div(row, kb.idx(p.phaseRows)));
}

bool mlir::mhc::projectBackwardIsWide(const KernelContext &ctx) {
  return planWide(ctx).has_value();
}

bool mlir::mhc::projectBackwardWideAddsAcc(const KernelContext &ctx) {
  std::optional<WidePlan> p = planWide(ctx);
  return p && p->pieces();
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
  emitWidePad(ctx, p);
  WideMain(ctx, p).emit();
  return success();
}
