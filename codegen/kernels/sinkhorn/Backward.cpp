//===- Backward.cpp - Sinkhorn's gradient: reverse mode per token ---------===//
//
// The backward kernel: a token per thread, its iteration history in shared
// memory. The log mode's gradient runs through the scaling form (plans
// K_ij u_i v_j, recomputed forward with u^t, v^t saved), and through the
// log domain (BackwardLogDomain.cpp) for the tokens whose sums left its
// safe range; the softmax_eps mode's is BackwardSoftmaxEps.cpp's.
//
//===----------------------------------------------------------------------===//

#include "kernels/sinkhorn/Sinkhorn.h"

using namespace mlir;
using namespace mlir::mhc;
using namespace mlir::mhc::sinkhorn;
using ::mhc::BufferRole;
using ::mhc::DType;
using ::mhc::SinkhornMode;

namespace {

/// The log mode's forward in the scaling form, saving u^t, v^t (2n floats
/// per iteration) at history[t * 2n]: returns u^T, v^T and `ok`, which is
/// false when a sum left the safe range.
SmallVector<Value> scalingForward(TokenMath &sk, History &history,
                                  ArrayRef<Value> K, int64_t T) {
  KernelBuilder &kb = sk.kb;
  int64_t n = sk.n;
  SmallVector<Value> start(2 * n, kb.f32(1.0));
  start.push_back(kb.boolean(true));
  return kb.loop(
      kb.idx(0), kb.idx(T), kb.idx(1), start,
      [&](Value t, ValueRange it) {
        SmallVector<Value> g(it.begin() + n, it.begin() + 2 * n);
        Value fine = it[2 * n];
        SmallVector<Value> u = sk.scale(K, g, true, fine);
        SmallVector<Value> next = concat(u, sk.scale(K, u, false, fine));
        history.save(kb.mul(t, kb.idx(2 * n)), next);
        next.push_back(fine);
        return next;
      });
}

/// Back through iteration t of the scaling form: G (n x n), ggt (n) and
/// gft (n) are the gradients of the logits, of g^t and of f^t; returns G,
/// the gradient of g^{t-1} and a zero gf for the iteration before.
SmallVector<Value> scalingReverseStep(TokenMath &sk, History &history,
                                      ArrayRef<Value> K, Value t,
                                      SmallVector<Value> G,
                                      ArrayRef<Value> ggt,
                                      SmallVector<Value> gft) {
  KernelBuilder &kb = sk.kb;
  int64_t n = sk.n;
  SmallVector<Value> cur = history.restore(kb.mul(t, kb.idx(2 * n)), 2 * n);
  ArrayRef<Value> f(cur.data(), n), g(cur.data() + n, n);
  // g^{t-1}: g = 0 (v = 1) before the first iteration.
  Value first = kb.eq(t, kb.idx(0));
  Value prevBase = kb.mul(kb.select(first, kb.idx(0), kb.sub(t, kb.idx(1))), kb.idx(2 * n));
  SmallVector<Value> prev = history.restore(prevBase, 2 * n);
  SmallVector<Value> gPrev;
  for (int64_t j = 0; j < n; ++j)
    gPrev.push_back(kb.select(first, kb.f32(1.0), prev[n + j]));
  // g^t_j = -LSE_i(L_ij + f^t_i): A = exp(L + f^t + g^t).
  SmallVector<Value> A = sk.scaledPlan(K, f, g);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      Value d = kb.mul(ggt[j], A[i * n + j]);
      G[i * n + j] = kb.sub(G[i * n + j], d);
      gft[i] = kb.sub(gft[i], d);
    }
  // f^t_i = -LSE_j(L_ij + g^{t-1}_j): B = exp(L + g^{t-1} + f^t).
  SmallVector<Value> B = sk.scaledPlan(K, f, gPrev);
  SmallVector<Value> ggPrev(n, kb.f32(0.0));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      Value d = kb.mul(gft[i], B[i * n + j]);
      G[i * n + j] = kb.sub(G[i * n + j], d);
      ggPrev[j] = kb.sub(ggPrev[j], d);
    }
  SmallVector<Value> zeroF(n, kb.f32(0.0));
  return concat(concat(G, ggPrev), zeroF);
}

/// The gradient through the log mode, with the forward run in the scaling
/// form (plans K_ij u_i v_j); `ok` turns false when a sum leaves the safe
/// range.
SmallVector<Value> scalingGrad(TokenMath &sk, History &history,
                               ArrayRef<Value> K, ArrayRef<Value> gP,
                               int64_t T, Value *ok) {
  KernelBuilder &kb = sk.kb;
  int64_t n = sk.n;
  SmallVector<Value> fg = scalingForward(sk, history, K, T);
  *ok = fg[2 * n];
  SmallVector<Value> P = sk.scaledPlan(K, ArrayRef<Value>(fg).take_front(n),
                                       ArrayRef<Value>(fg).slice(n, n));
  // Through P = exp(f + L + g).
  SmallVector<Value> gL0, gf(n, kb.f32(0.0)), gg(n, kb.f32(0.0));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      Value d = kb.mul(gP[i * n + j], P[i * n + j]);
      gL0.push_back(d);
      gf[i] = kb.add(gf[i], d);
      gg[j] = kb.add(gg[j], d);
    }
  // Iterations T..1, as t' = T-1..0 with f^t at history[t'*2n].
  SmallVector<Value> init = concat(concat(gL0, gg), gf);
  SmallVector<Value> out = kb.loop(
      kb.idx(0), kb.idx(T), kb.idx(1), init, [&](Value r, ValueRange it) {
        Value t = kb.sub(kb.idx(T - 1), r);
        SmallVector<Value> G(it.begin(), it.begin() + n * n);
        SmallVector<Value> ggt(it.begin() + n * n, it.begin() + n * n + n);
        SmallVector<Value> gft(it.begin() + n * n + n, it.end());
        return scalingReverseStep(sk, history, K, t, std::move(G), ggt,
                                  std::move(gft));
      });
  out.resize(n * n);
  return out;
}

/// The log mode's gradient of token m into glogits: the scaling form, and
/// the log domain for the tokens whose sums left its safe range.
void emitLogModeGrad(TokenMath &sk, History &history, LaunchBuilder &l,
                     Value m, ArrayRef<Value> L, ArrayRef<Value> gP, int64_t T) {
  KernelBuilder &kb = sk.kb;
  int64_t n = sk.n;
  // Base 2 (see negLog2SumExp2): the plans below are docs/MATH.md's.
  SmallVector<Value> K = sk.kernelMatrix(toBase2(kb, L));
  Value ok;
  SmallVector<Value> fast = scalingGrad(sk, history, K, gP, T, &ok);
  kb.when(ok, [&] { storeMatrix(kb, fast, l.arg("glogits"), m, n); });
  kb.when(kb.select(ok, kb.boolean(false), kb.boolean(true)), [&] {
    emitLogDomainGrad(kb, n, T, l.arg("logits"), l.arg("gP"), l.arg("glogits"),
                      m, history);
  });
}

} // namespace

LogicalResult sinkhorn::buildBackward(KernelContext &ctx) {
  int64_t n = ctx.n(), T = ctx.spec.iters;
  int64_t hist = ::mhc::sinkhornHistoryFloats(ctx.spec);
  ctx.buffer("gP", DType::F32, BufferRole::Input, {n * n, 0});
  ctx.buffer("logits", DType::F32, BufferRole::Input, {n * n, 0});
  ctx.buffer("glogits", DType::F32, BufferRole::Output, {n * n, 0});
  // As many threads as the history leaves room for (unsupportedReason
  // checks that a warp's worth fits), at most 64.
  int64_t fit = ::mhc::kSinkhornHistoryBytes / (hist * 4);
  const int threads = static_cast<int>(std::min<int64_t>(64, (fit / 32) * 32));
  LaunchBuilder &l = ctx.launch("main");
  l.param("gP").param("logits").param("glogits").param("M").block(threads)
      .grid({threads, 0}).sharedF32(threads * hist);
  KernelBuilder kb = ctx.begin(l);
  TokenMath sk{kb, n, ctx.spec.eps};
  Value tid = kb.threadId();
  History history{kb, l.shared(), tid, threads};
  Value m = kb.add(kb.mul(kb.blockId(), kb.idx(threads)), tid);
  kb.when(kb.lt(m, l.tokens()), [&] {
    SmallVector<Value> L = loadMatrix(kb, l.arg("logits"), m, n);
    SmallVector<Value> gP = loadMatrix(kb, l.arg("gP"), m, n);
    if (ctx.spec.mode == SinkhornMode::Log) {
      emitLogModeGrad(sk, history, l, m, L, gP, T);
      return;
    }
    storeMatrix(kb, softmaxEpsGrad(sk, history, L, gP, T), l.arg("glogits"), m, n);
  });
  return success();
}
