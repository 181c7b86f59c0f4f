//===- Sinkhorn.h - what the Sinkhorn family's files share ------*- C++ -*-===//
//
// One token's n x n math in one thread (TokenMath.cpp), the backward's
// per-thread history in shared memory, and the launches and gradients that
// Forward.cpp, Backward.cpp, BackwardLogDomain.cpp and BackwardSoftmaxEps.cpp
// define for Sinkhorn.cpp's dispatch.
//
//===----------------------------------------------------------------------===//

#ifndef MHC_CODEGEN_KERNELS_SINKHORN_SINKHORN_H
#define MHC_CODEGEN_KERNELS_SINKHORN_SINKHORN_H

#include "builder/KernelContext.h"

namespace mlir::mhc::sinkhorn {

/// -log2(sum_k 2^v_k), max-shifted. The log mode runs in base 2 (logits
/// scaled by log2(e) once): potentials are log2(e) times docs/MATH.md's, the
/// plans exp(L + f + g) = 2^(L2 + f2 + g2) are the same numbers, and each
/// exp/log is one ex2/lg2 instruction instead of a range-reduced libdevice
/// call (the kernel is issue-bound: 20 iterations x 2n^2 exponentials).
Value negLog2SumExp2(KernelBuilder &kb, ArrayRef<Value> v);
/// L * log2(e): the log mode's logits in base 2.
Value toBase2(KernelBuilder &kb, Value v);
SmallVector<Value> toBase2(KernelBuilder &kb, ArrayRef<Value> L);
/// -log2(sum_k 2^(a_k + b_k)): a potential from a row or column of L2 and
/// the other potential.
Value negLog2SumExp2Sum(KernelBuilder &kb, ArrayRef<Value> a, ArrayRef<Value> b);
/// Row i of the plan exp(L + f + g) from base-2 values: 2^((L2_ij + f_i) + g_j).
SmallVector<Value> planRow(KernelBuilder &kb, ArrayRef<Value> Lrow, Value fi,
                           ArrayRef<Value> g);

/// One token's n x n matrices (row-major value lists) in one thread: the
/// log mode's potentials and scaling form, the softmax_eps mode's sums and
/// normalisations.
struct TokenMath {
  KernelBuilder &kb;
  int64_t n;
  float eps;

  /// f_i = -LSE_j(L_ij + g_j) (base 2: L, f, g scaled by log2(e)).
  SmallVector<Value> rowPotential(ArrayRef<Value> L, ArrayRef<Value> g);
  /// g_j = -LSE_i(L_ij + f_i).
  SmallVector<Value> colPotential(ArrayRef<Value> L, ArrayRef<Value> f);
  /// exp(L_ij + f_i + g_j), from the base-2 values.
  SmallVector<Value> plan(ArrayRef<Value> L, ArrayRef<Value> f,
                          ArrayRef<Value> g);

  /// The scaling (linear) form of the log mode: K = 2^(L2 - rowmax), and
  /// with u = e^(f + rowmax), v = e^g the iteration is u = 1 / (K v),
  /// v = 1 / (K^T u) and every plan exp(L + f + g) is K_ij u_i v_j: 2n
  /// reciprocals per iteration instead of 2n^2 exponentials and 2n logs.
  SmallVector<Value> kernelMatrix(ArrayRef<Value> L2);
  /// exp(L_ij - max_j L_ij) (or 2^(...)): every entry <= 1, no overflow.
  SmallVector<Value> rowShiftedExp(ArrayRef<Value> L, bool base2);
  /// 1 / (K v) over rows (or 1 / (K^T u) over columns); `ok` turns false
  /// when a sum leaves [2^-100, 2^100] (or is NaN): the caller then redoes
  /// the token in the log domain, which has no range limit.
  SmallVector<Value> scale(ArrayRef<Value> K, ArrayRef<Value> w, bool rows,
                           Value &ok);
  /// K_ij u_i v_j.
  SmallVector<Value> scaledPlan(ArrayRef<Value> K, ArrayRef<Value> u,
                                ArrayRef<Value> v);

  SmallVector<Value> sums(ArrayRef<Value> P, bool rows);
  /// P / (sum + eps) along rows or columns, given the sums: n divisions
  /// and n^2 multiplications (a correctly rounded division is ~10
  /// instructions; x * (1/d) is within 1.5 ulp of x / d).
  SmallVector<Value> normalize(ArrayRef<Value> P, ArrayRef<Value> s,
                               bool rows);
  SmallVector<Value> normalize(ArrayRef<Value> P, ArrayRef<Value> s,
                               bool rows, float addend);
  /// softmax_j(L) + eps.
  SmallVector<Value> softmaxPlusEps(ArrayRef<Value> L);
  SmallVector<Value> softmax(ArrayRef<Value> L);
};

/// Token m's n x n matrix in `buf` (row-major, tokens n*n apart).
SmallVector<Value> loadMatrix(KernelBuilder &kb, Value buf, Value m, int64_t n);
void storeMatrix(KernelBuilder &kb, ArrayRef<Value> P, Value buf, Value m,
                 int64_t n);
SmallVector<Value> concat(ArrayRef<Value> a, ArrayRef<Value> b);

/// The backward's per-token iteration history in shared memory, thread-minor
/// so that the accesses are conflict-free: history[k] of this thread is
/// smem[k * threads + tid].
struct History {
  KernelBuilder &kb;
  Value smem, tid;
  int64_t threads;

  Value slot(Value k);
  void save(Value base, ArrayRef<Value> v);
  SmallVector<Value> restore(Value base, int64_t count);
};

/// The kernels (Forward.cpp, Backward.cpp).
LogicalResult buildForward(KernelContext &ctx);
LogicalResult buildBackward(KernelContext &ctx);

/// The log mode's gradient in the log domain (BackwardLogDomain.cpp) of
/// token m: logits and gP read from global memory, the gradient
/// accumulated in G (glogits) itself.
void emitLogDomainGrad(KernelBuilder &kb, int64_t n, int64_t T, Value logits,
                       Value gP, Value G, Value m, History &history);
/// The softmax_eps mode's gradient of the logits L (BackwardSoftmaxEps.cpp):
/// the forward recomputed, each normalisation undone in reverse, then back
/// through the softmax.
SmallVector<Value> softmaxEpsGrad(TokenMath &sk, History &history,
                                  ArrayRef<Value> L, ArrayRef<Value> gP,
                                  int64_t T);

} // namespace mlir::mhc::sinkhorn

#endif // MHC_CODEGEN_KERNELS_SINKHORN_SINKHORN_H
