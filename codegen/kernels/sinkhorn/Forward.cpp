//===- Forward.cpp - Sinkhorn's forward: a token per thread ---------------===//
//
// The plan of one token in one thread (emitSinkhornPlan, shared with the
// fused pre step) and the forward kernel around it: the log mode in the
// scaling form, redone in the log domain for the tokens whose sums left
// its range; the softmax_eps mode's alternating normalisations.
//
//===----------------------------------------------------------------------===//

#include "kernels/Kernels.h"
#include "kernels/sinkhorn/Sinkhorn.h"

using namespace mlir;
using namespace mlir::mhc;
using namespace mlir::mhc::sinkhorn;
using ::mhc::BufferRole;
using ::mhc::DType;
using ::mhc::SinkhornMode;

void mlir::mhc::emitSinkhornPlan(KernelBuilder &kb,
                                 const ::mhc::KernelSpec &spec,
                                 ArrayRef<Value> logits,
                                 function_ref<void(ArrayRef<Value>)> store) {
  int64_t n = spec.n, T = spec.iters;
  TokenMath sk{kb, n, spec.eps};
  SmallVector<Value> L(logits.begin(), logits.end());
  if (spec.mode == SinkhornMode::Log) {
    L = toBase2(kb, L);
    // Scaling form first (MUFU-light); the log domain only for tokens
    // whose sums left the safe range.
    SmallVector<Value> K = sk.kernelMatrix(L);
    SmallVector<Value> ones(n, kb.f32(1.0));
    SmallVector<Value> init = concat(ones, ones);
    init.push_back(kb.boolean(true));
    SmallVector<Value> uv = kb.loop(
        kb.idx(0), kb.idx(T), kb.idx(1), init, [&](Value, ValueRange it) {
          SmallVector<Value> v(it.begin() + n, it.begin() + 2 * n);
          Value ok = it[2 * n];
          SmallVector<Value> u = sk.scale(K, v, true, ok);
          SmallVector<Value> next = concat(u, sk.scale(K, u, false, ok));
          next.push_back(ok);
          return next;
        });
    Value ok = uv[2 * n];
    kb.when(ok, [&] {
      store(sk.scaledPlan(K, ArrayRef<Value>(uv).take_front(n),
                          ArrayRef<Value>(uv).slice(n, n)));
    });
    kb.when(kb.select(ok, kb.boolean(false), kb.boolean(true)), [&] {
      SmallVector<Value> zero(n, kb.f32(0.0));
      SmallVector<Value> fg = kb.loop(
          kb.idx(0), kb.idx(T), kb.idx(1), concat(zero, zero),
          [&](Value, ValueRange it) {
            SmallVector<Value> g(it.begin() + n, it.end());
            SmallVector<Value> f = sk.rowPotential(L, g);
            return concat(f, sk.colPotential(L, f));
          });
      store(sk.plan(L, ArrayRef<Value>(fg).take_front(n),
                    ArrayRef<Value>(fg).drop_front(n)));
    });
    return;
  }
  SmallVector<Value> P = sk.softmaxPlusEps(L);
  P = sk.normalize(P, sk.sums(P, false), false);
  P = kb.loop(kb.idx(1), kb.idx(T), kb.idx(1), P, [&](Value, ValueRange it) {
    SmallVector<Value> Q(it.begin(), it.end());
    Q = sk.normalize(Q, sk.sums(Q, true), true);
    return sk.normalize(Q, sk.sums(Q, false), false);
  });
  store(P);
}

LogicalResult sinkhorn::buildForward(KernelContext &ctx) {
  int64_t n = ctx.n();
  ctx.buffer("logits", DType::F32, BufferRole::Input, {n * n, 0});
  ctx.buffer("P", DType::F32, BufferRole::Output, {n * n, 0});
  // One token per thread: M = 32768 is only 1024 warps, so small blocks
  // spread them over every SM.
  const int threads = 64;
  LaunchBuilder &l = ctx.launch("main");
  l.param("logits").param("P").param("M").block(threads).grid({threads, 0});
  KernelBuilder kb = ctx.begin(l);
  Value m = kb.add(kb.mul(kb.blockId(), kb.idx(threads)), kb.threadId());
  kb.when(kb.lt(m, l.tokens()), [&] {
    emitSinkhornPlan(kb, ctx.spec, loadMatrix(kb, l.arg("logits"), m, n),
                     [&](ArrayRef<Value> P) { storeMatrix(kb, P, l.arg("P"), m, n); });
  });
  return success();
}
