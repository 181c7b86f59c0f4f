//===- Kernels.h - the op families' builders --------------------*- C++ -*-===//
//
// One builder per op family (kernels/<Family>.cpp, the project family in
// kernels/project/, sinkhorn in kernels/sinkhorn/, the layer seam in
// kernels/seam/) turns a KernelSpec into its buffers and launches, and the
// per-token math that the fused pre step shares with scale and sinkhorn.
//
//===----------------------------------------------------------------------===//

#ifndef MHC_CODEGEN_KERNELS_KERNELS_H
#define MHC_CODEGEN_KERNELS_KERNELS_H

#include "builder/KernelContext.h"

namespace mlir::mhc {

/// Scale's per-logit math (docs/MATH.md, scale), shared by the scale kernel
/// and the fused pre step so both give the same bits: r = 1/sqrt(ms +
/// norm_eps); the segment (0 pre, 1 post, 2 res) of logit index k; z =
/// alpha h r + beta; the squash of z for pre (sigmoid + pre_eps) or post
/// (post_mult sigmoid).
Value scaleRsqrt(KernelBuilder &kb, const ::mhc::KernelSpec &spec, Value ms);
Value scaleSegment(KernelBuilder &kb, int64_t n, Value k);
Value scaleLogit(KernelBuilder &kb, Value alpha, Value h, Value r, Value beta);
Value scaleSquash(KernelBuilder &kb, const ::mhc::KernelSpec &spec, Value z,
                  bool pre);
/// One token's forward Sinkhorn (docs/MATH.md, sinkhorn) from its n*n logits
/// (row-major, f32) in one thread; calls store(P) on the path the token
/// takes (the log mode falls back to the log domain when its scaling form
/// leaves the safe range). Shared by the sinkhorn kernel and the pre step.
void emitSinkhornPlan(KernelBuilder &kb, const ::mhc::KernelSpec &spec,
                      ArrayRef<Value> logits,
                      function_ref<void(ArrayRef<Value>)> store);

/// The pre step's parameters and results after the projection's (alpha,
/// beta, pre, post, logits, P, y), in order: the tail's and the one-launch
/// kernel's.
void declarePreTailIO(KernelContext &ctx);

/// Thread tid's column sum of token m (tid <= N), shared by the pre tail and
/// the one-launch kernels: ms (tid == N: the sum of squares over K) or
/// h_tid, stored and into `row`.
void storeTokenSum(KernelContext &ctx, LaunchBuilder &l, KernelBuilder &kb,
                   Value m, Value row, Value sum);

/// The pre step's per-token tail after the split-K sums, shared by the
/// fused pre step's tail launch and the one-launch kernels (the same bits):
/// a thread per logit k < N: z = scaleLogit(alpha, h_k, scaleRsqrt(ms),
/// beta) from `row` (h at [0, N), ms at N; alphaBeta() gives the thread's
/// alpha and beta); pre (k < n) and the buffer `post` (n <= k < 2n)
/// squashed and stored at token m, logits z stored; keepPre(k, pre) and
/// keepLogit(k - 2n, z) for the caller's shared copies.
void emitTokenScale(KernelBuilder &kb, const ::mhc::KernelSpec &spec,
                    LaunchBuilder &l, Value m, Value row, StringRef post,
                    function_ref<std::pair<Value, Value>()> alphaBeta,
                    function_ref<void(Value, Value)> keepPre,
                    function_ref<void(Value, Value)> keepLogit);
/// Thread k's alpha and beta for emitTokenScale (k = tid clamped to N - 1,
/// so every thread loads valid words), as f32: issued ahead of the token's
/// sums so their round trip is off the scale's path.
std::pair<Value, Value> loadScaleParams(KernelBuilder &kb, const ::mhc::KernelSpec &spec,
                                        LaunchBuilder &l);
/// Token m's Sinkhorn in this thread (emitSinkhornPlan) from its n*n logits
/// at logitsS[at ..]: the plan stored into buffer `P` at m.
void emitTokenSinkhorn(KernelBuilder &kb, const ::mhc::KernelSpec &spec,
                       LaunchBuilder &l, Value m, Value logitsS, Value at,
                       StringRef P);

LogicalResult buildAggregate(KernelContext &ctx);
/// aggregate.bwd's gpre alone (gy, x -> gpre; no gx, pre or acc), in the
/// backward's own order: the layer seam's token pass (seam/BackwardFused.cpp).
LogicalResult buildAggregateGradPre(KernelContext &ctx);
/// The fused pre step (Pre.cpp): the projection's partial launches,
/// then one launch per token for the rest.
LogicalResult buildPre(KernelContext &ctx);
/// The pre step's backward (PreBackward.cpp): aggregate's x gradient folded
/// into the projection backward where the seam's is, else the four ops'
/// backward kernels in turn.
LogicalResult buildPreBackward(KernelContext &ctx);
/// The pre step's tail launch alone, after partials [S, M, N + 1] some
/// other launch left (the seam's expand + partials): buffers partials, x,
/// h, ms, then the tail's own.
LogicalResult buildPreTail(KernelContext &ctx);
/// The forward of pre and post_pre for small M (spec.cooperative,
/// onelaunch/OneLaunch.cpp): one cooperative launch with two grid barriers.
LogicalResult buildPreOneLaunch(KernelContext &ctx);
LogicalResult buildPostPreOneLaunch(KernelContext &ctx);
LogicalResult buildExpandCombine(KernelContext &ctx);
LogicalResult buildScale(KernelContext &ctx);
LogicalResult buildSinkhorn(KernelContext &ctx);
LogicalResult buildProject(KernelContext &ctx);
/// The layer seam (kernels/seam/Seam.cpp): expand_combine of layer l, then
/// the pre step of layer l+1, forward and backward (docs/design/seam.md).
LogicalResult buildPostPre(KernelContext &ctx);

} // namespace mlir::mhc

#endif // MHC_CODEGEN_KERNELS_KERNELS_H
