//===- ForwardStagedPlan.cpp - the staged forward's plan -------------------===//

#include "kernels/project/ForwardStagedPlan.h"

#include "builder/LaunchBuilder.h"
#include "kernels/project/Project.h"

#include <algorithm>

using namespace mlir;
using namespace mlir::mhc;
using ::mhc::DType;

namespace {

/// The registers' part of the plan: blocks per SM, m-tiles per warp and
/// whether wgmma multiplies.
void planStagedRegisters(const KernelContext &ctx, StagedPlan &s) {
  // A pair of k-steps holds the accumulators (twice in precise mode) and
  // B's words (parts x n-tiles x 4) in registers: two blocks per SM (128
  // registers) while they stay near 64, else one block (255 registers)
  // with all the shared memory for its ring (two blocks spill at n = 8).
  int64_t live = 4 * s.nTiles * (ctx.spec.tf32 ? 1 : 2) + 4 * s.parts * s.nTiles;
  s.blocksPerSM = live <= 64 ? 2 : 1;
  if (s.blocksPerSM == 1) // (the x of 4 pairs would spill at n = 8)
    s.sq = 4;
  // With one block (eight warps) per SM and the tf32 mode's two parts, a
  // warp takes two m-tiles (32 tokens): each B word read from shared memory
  // feeds two mma's, and the next chunk's x is loaded while this chunk's
  // mma's run (carried in the loop's values; 250 registers at n = 8, no
  // spill); the alternatives measured slower (docs/design/project.md). The
  // precise mode's fp32 totals would pass the register file.
  if (s.blocksPerSM == 1 && ctx.spec.tf32)
    s.mTiles = 2;
  // On sm_90a these specs multiply with wgmma instead (mma.sync's issue
  // rate bounds n = 8): B goes from the ring to the tensor cores without
  // passing through registers, and a product covers 64 tokens x N. That
  // frees the registers for 128-column chunks, each token row read 256
  // bytes at a time, which leaves the launch bound by its memory path.
  s.wgmma = s.mTiles > 1 && ctx.spec.arch == "sm_90a" && s.nTiles * 8 <= 256;
  if (s.wgmma)
    s.sq = 8;
}

} // namespace

std::optional<StagedPlan> mlir::mhc::planStaged(const KernelContext &ctx) {
  // Bulk copies and expect-tx mbarriers need sm_90. x goes from global
  // memory to registers, a lane's 16 bytes per pair in accesses as wide as
  // its rows' alignment allows: 16 bytes at K % 8 == 0, two 8-byte ones at
  // K % 8 == 4, four 4-byte ones at K % 8 == 2 or 6 (or two aligned 16-byte
  // ones shifted by words: realignX; or by the rows' parity: parityRows),
  // at odd K the same granules shifted by words and a half-word (realignX)
  // or five aligned 4-byte words funnel-shifted by one (halfRows),
  // any K with a last chunk masked at K.
  if (ctx.spec.act != DType::BF16 || ctx.spec.arch == "sm_80")
    return std::nullopt;
  int64_t xAlign = projectRowAlignBytes(ctx, ctx.spec.act);
  StagedPlan s;
  s.N = ctx.N();
  s.K = ctx.K();
  s.sq = 8;
  s.parts = ctx.spec.tf32 ? 2 : 3;
  s.nTiles = (s.N + 7) / 8;
  s.precise = !ctx.spec.tf32;
  s.hasWeight = ctx.spec.hasWeight;
  s.xUnit = xAlign / 2;
  s.paramUnit = projectRowAlignBytes(ctx, ctx.spec.param) /
                ::mhc::byteWidth(ctx.spec.param);
  planStagedRegisters(ctx, s);
  // The widest chunk whose ring of kStages buffers fits a block's share of
  // the shared memory, no wider than K (the masked last chunk's products
  // past K are work for nothing); unmasked where it divides K. (A narrower
  // dividing chunk ran n = 8, C = 5124 at 32 columns: 0.60 of C = 5120's
  // speed on H200, docs/design/project.md.)
  int64_t ringBytes =
      (LaunchBuilder::sharedLimit(ctx.spec.arch) - 2048) / s.blocksPerSM;
  const int64_t widest = s.sq;
  auto pick = [&] {
    for (s.sq = widest; s.sq >= 2; s.sq /= 2)
      if (s.K >= s.chunk() && kStages * s.chunkBytes() <= ringBytes)
        return true;
    return false;
  };
  if (!pick())
    return std::nullopt;
  s.split = {s.tokensPerBlock(), ctx.persistentBlocks(),
             std::min<int64_t>(kMaxForwardSplit, s.chunks())};
  // S fills the waves of the flagship's SMs: a partial last wave runs its
  // blocks on few SMs at a fraction of the bandwidth
  // (docs/design/project.md).
  s.split.waveSlots = ctx.smCount() * s.blocksPerSM;
  // One token block (a decode step, a small batch) would run S = 64 blocks
  // on the 132 SMs of an H100, each 3.5 chunks at C = 7168: its chunks
  // spread over every SM once instead (measured: docs/design/project.md).
  s.split.singleBlock = std::min<int64_t>(s.chunks(), ctx.smCount());
  return s;
}
