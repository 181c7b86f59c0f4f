//===- Project.h - the projection's variants --------------------*- C++ -*-===//
//
// The projection family's variants (one file each) and what they share with
// Project.cpp's dispatch and the fused pre step.
//
//===----------------------------------------------------------------------===//

#ifndef MHC_CODEGEN_KERNELS_PROJECT_PROJECT_H
#define MHC_CODEGEN_KERNELS_PROJECT_PROJECT_H

#include "builder/KernelContext.h"

#include <algorithm>

namespace mlir::mhc {

/// The projection forward (Forward.cpp): a variant's partial launches,
/// then the reduce launch.
LogicalResult buildProjectForward(KernelContext &ctx);
/// The projection forward's launches before its reduce: the buffers, the
/// split rule and the launches that leave per-split partials [S, M, N + 1]
/// in the "partials" workspace (sum over S in order: h, then the sum of
/// squares), from the variant that serves the spec. buildProjectForward
/// adds the reduce launch; the fused pre step its tail.
LogicalResult buildProjectForwardPartials(KernelContext &ctx);
/// Loads in flight per step of the sums over the S partials (the reduce
/// launch from global memory, the pre step's tail from shared memory once
/// staged): at few tokens S is the SM count, where the reduce's steps of
/// dependent L2 round trips are most of the launch.
inline constexpr int64_t kPartialsInFlight = 16;
/// The most splits of a forward partial launch beyond one token block (its
/// split rule's maxSplit); one token block splits over at most the
/// flagship's SMs (singleBlock).
inline constexpr int64_t kMaxForwardSplit = 64;
/// The largest S of any forward partial launch of the spec's arch.
inline int64_t forwardSplitBound(const KernelContext &ctx) {
  return std::max(ctx.smCount(), kMaxForwardSplit);
}
/// Bytes to which every row of K = n*C elements of `dtype` starts aligned,
/// at most 16: below 16 where K % (16 / bytes) != 0 (any C, issue 35).
int64_t projectRowAlignBytes(const KernelContext &ctx, ::mhc::DType dtype);
/// Caps kb's vector accesses to the buffers among `names` that the spec
/// declares, all parameters of the launch (buffers of rows of K
/// elements: x, gx, acc, phi, ...), at their row
/// alignment, so that any K runs the same kernels in narrower accesses.
void limitRowAccesses(const KernelContext &ctx, KernelBuilder &kb,
                      LaunchBuilder &l, ArrayRef<const char *> names);
/// The forward's inputs and outputs (x, phi[, weight], h, ms), in order.
void declareProjectForwardIO(KernelContext &ctx);
/// Where a block of a split-K forward partial launch works: lane (g, t) of
/// `warp`, token block mBlock, chunk range [cBegin, cEnd) of split `split`.
struct ProjectSplitK {
  Value M, S, lane, warp, g, t, mBlock, split, cBegin, cEnd;
};
ProjectSplitK projectSplitK(KernelBuilder &kb, LaunchBuilder &l,
                            int64_t chunks);
/// Writes token `row`'s partials of split sk.split into [S, M, N + 1]: the
/// sum of squares `ms` (added over the row group's four lanes first, in a
/// fixed order) and acc(nt, e) at columns nt*8 + 2t + e < N.
void storeProjectPartials(KernelBuilder &kb, const ProjectSplitK &sk,
                          Value partials, Value row, Value ms, int64_t N,
                          int64_t nTiles,
                          function_ref<Value(int64_t, int64_t)> acc);
/// The forward for bf16 activations on sm_90+ (ForwardStaged.cpp): whether
/// it serves the spec, and its buffers, pack and partial launches.
bool projectForwardIsStaged(const KernelContext &ctx);
LogicalResult buildProjectForwardStaged(KernelContext &ctx);
/// The layer seam's "expand + partials" (docs/design/seam.md): the staged
/// pack and partial launches with x_next = P^T x + post (f + bias) computed
/// where the partial loads x (layer l's), stored and multiplied on. Serves
/// staged specs in the (C, n) layout with n | 8 and one m-tile per warp;
/// buffers f, post, x, P[, bias], x_next, phi[, weight] and the workspaces.
bool projectForwardExpands(const KernelContext &ctx);
LogicalResult buildProjectForwardExpand(KernelContext &ctx);
/// The forward for every other spec (ForwardTf32.cpp): its buffers and
/// partial launch.
LogicalResult buildProjectForwardTf32(KernelContext &ctx);
/// The projection backward (Backward.cpp): the Wide or Wgmma variant where
/// it serves the spec (with acc, then launch "acc"), else the mma.sync
/// kernel.
LogicalResult buildProjectBackward(KernelContext &ctx);
/// The backward's inputs and outputs: gh, gms, x, phi[, weight][, acc],
/// gx, gphi[, gweight] (in order).
void declareProjectBackwardIO(KernelContext &ctx);
/// The mma.sync backward for every n (BackwardMma.cpp); `foldAggregate`:
/// see buildProjectBackwardFoldAggregate.
LogicalResult buildProjectBackwardMma(KernelContext &ctx,
                                      bool foldAggregate = false);
/// The layer seam's and the pre step's main pass (docs/design/seam.md, "The
/// fused backward"): the mma.sync backward with acc (x's gradient from its
/// other users: acc=1, acc=f32, or none) plus aggregate's gradient pre (x)
/// gy, formed before gx is stored, bitwise aggregate.bwd's gx; extra
/// buffers gy [M, C], pre [M, n].
/// Serves specs on the mma.sync kernel in the (C, n) layout whose lanes
/// hold whole channels (n | 2T columns).
bool projectBackwardFoldsAggregate(const KernelContext &ctx);
LogicalResult buildProjectBackwardFoldAggregate(KernelContext &ctx);
/// The n = 6 and 8 projection backward on wgmma (BackwardWgmma.cpp):
/// whether it serves the spec, and its buffers and launches.
bool projectBackwardIsWgmma(const KernelContext &ctx);
LogicalResult buildProjectBackwardWgmma(KernelContext &ctx);
/// The same specs when their columns fit one wave of blocks
/// (BackwardWide.cpp), which takes precedence.
bool projectBackwardIsWide(const KernelContext &ctx);
LogicalResult buildProjectBackwardWide(KernelContext &ctx);
/// Whether that kernel stores gx in pieces (rows not 16-byte aligned) and
/// adds acc there itself, so that no launch "acc" follows it.
bool projectBackwardWideAddsAcc(const KernelContext &ctx);

} // namespace mlir::mhc

#endif // MHC_CODEGEN_KERNELS_PROJECT_PROJECT_H
