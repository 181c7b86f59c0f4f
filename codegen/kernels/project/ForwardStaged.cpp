//===- ForwardStaged.cpp - projection forward for bf16 activations --------===//
//
// h = (x w) phi^T and the sum of squares for bf16 x, on bf16 tensor cores
// (mma.sync m16n8k16) with phi staged through shared memory by bulk copies.
//
// phi w is split once per call (launch "pack") into P bf16 parts, hi =
// rn(v), lo = rn(v - hi)[, rn(v - hi - lo)]: two parts carry 2^-17 of v
// (finer than tf32's 2^-11) for the tf32 mode, three carry fp32's 24 bits.
// bf16 x times a bf16 part is exact in fp32, so x is never converted: a
// lane's 16-byte x load is two k-steps of its A fragments as they are. The
// parts are written in fragment order: per chunk of 16·SQ columns, per pair
// of k-steps, part and n-tile, 32 lanes x 16 bytes, so that one bulk copy
// moves a chunk's B into shared memory and every B read is a contiguous
// 512-byte warp access.
//
// Partial launch: 8 warps, warp w owns tokens 16w..16w+15 of the block's
// 128 (two m-tiles, 32w..32w+31 of 256, for n >= 6 in the tf32 mode); lane
// (g, t) loads tokens g and g + 8 of an m-tile, 16 bytes at byte 64j + 16t
// of the chunk's run for pair j (a warp access covers 8 rows x 64 bytes). The
// contraction index is permuted inside each 32-column pair: logical k
// {2t, 2t+1, 2t+8, 2t+9} of step 2j+h is physical 32j + 8t + 4h + {0..3},
// for A and B alike. Thread 0 keeps a ring of RST chunk buffers filled: it
// waits until every warp released the buffer (an mbarrier per buffer), then
// issues the next chunk's copy, which completes on the buffer's "full"
// mbarrier. A warp releases a buffer after a proxy fence: without it the
// next copy can overwrite B that slow lanes are still reading. Split-K over
// S ranges of chunks writes the fixed-order partials [S, M, N + 1] that
// Forward.cpp's reduce launch sums.
//
// Faster than the register-fed tf32 variant (ForwardTf32.cpp) at n = 4
// (docs/design/project.md).
//
// Specs with one block per SM (n >= 6 in the tf32 mode) on sm_90a multiply
// with wgmma instead: warpgroup G (warps 4G..4G+3) owns two 64-token
// m-tiles, warp w of it rows 16w..16w+15 of each, whose A fragments are
// the same x words as above. The pack then writes each (k-step, part)
// tile of B as wgmma's K-major core matrices, and the products read B
// from the ring through descriptors; a chunk's products are one group,
// waited for before the warp releases the buffer.
//
// This file: the variant's entry points. The launches' emitters are
// declared in ForwardStagedLaunches.h; the plan is ForwardStagedPlan's.
//
//===----------------------------------------------------------------------===//

#include "kernels/project/ForwardStagedLaunches.h"

using namespace mlir;
using namespace mlir::mhc;
using ::mhc::BufferRole;
using ::mhc::DType;

bool mlir::mhc::projectForwardExpands(const KernelContext &ctx) {
  std::optional<StagedPlan> p = planStaged(ctx);
  // (K % 8 == 0: a lane's f, x_next and bias accesses are whole vectors.)
  return p && p->K % 8 == 0 && !p->wgmma && p->mTiles == 1 &&
         ctx.spec.layout == ::mhc::Layout::CN && 8 % ctx.n() == 0;
}

LogicalResult mlir::mhc::buildProjectForwardExpand(KernelContext &ctx) {
  if (!projectForwardExpands(ctx))
    return failure();
  StagedPlan p = *planStaged(ctx);
  p.expand = true;
  p.hasBias = ctx.spec.hasBias;
  p.n = ctx.n();
  p.C = ctx.C();
  ctx.manifest.split = p.split;
  DType act = ctx.spec.act;
  // expand_combine's operands, x_next, then the projection's parameters.
  ctx.buffer("f", act, BufferRole::Input, {p.C, 0});
  ctx.buffer("post", DType::F32, BufferRole::Input, {p.n, 0});
  ctx.buffer("x", act, BufferRole::Input, {p.K, 0});
  ctx.buffer("P", DType::F32, BufferRole::Input, {p.n * p.n, 0});
  if (p.hasBias)
    ctx.buffer("bias", ctx.spec.param, BufferRole::Input, {0, p.C});
  ctx.buffer("x_next", act, BufferRole::Output, {p.K, 0});
  ctx.buffer("phi", ctx.spec.param, BufferRole::Input, {0, p.N * p.K});
  if (p.hasWeight)
    ctx.buffer("weight", ctx.spec.param, BufferRole::Input, {0, p.K});
  ctx.buffer("packed", DType::BF16, BufferRole::Workspace,
             {0, p.parts * p.nTiles * 8 * p.paddedK()});
  ctx.buffer("partials", DType::F32, BufferRole::Workspace, {0, 0, p.N + 1});
  emitMmaSyncPack(ctx, p);
  emitStagedPartial(ctx, p);
  return success();
}

bool mlir::mhc::projectForwardIsStaged(const KernelContext &ctx) {
  return planStaged(ctx).has_value();
}

LogicalResult mlir::mhc::buildProjectForwardStaged(KernelContext &ctx) {
  StagedPlan p = *planStaged(ctx);
  ctx.manifest.split = p.split;
  declareProjectForwardIO(ctx);
  ctx.buffer("packed", DType::BF16, BufferRole::Workspace,
             {0, p.parts * p.nTiles * 8 * p.paddedK()});
  ctx.buffer("partials", DType::F32, BufferRole::Workspace, {0, 0, p.N + 1});
  if (p.wgmma)
    emitWgmmaPack(ctx, p);
  else
    emitMmaSyncPack(ctx, p);
  emitStagedPartial(ctx, p);
  return success();
}
