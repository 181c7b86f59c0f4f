//===- PreToken.cpp - a token's pre step after its split-K sums -----------===//
//
// What the fused pre step's tail launch (Pre.cpp) and the one-launch kernels
// (onelaunch/) do per token once its partials are summed, in one place so
// that both give the same bits: its h and ms stored, its logits scaled
// (pre, post, logits), its Sinkhorn.
//
//===----------------------------------------------------------------------===//

#include "kernels/Kernels.h"

using namespace mlir;
using namespace mlir::mhc;

void mlir::mhc::storeTokenSum(KernelContext &ctx, LaunchBuilder &l, KernelBuilder &kb,
                              Value m, Value row, Value sum) {
  int64_t N = ctx.N(), K = ctx.K();
  Value tid = kb.threadId();
  kb.when(kb.eq(tid, kb.idx(N)), [&] {
    Value ms = kb.div(sum, kb.f32(static_cast<double>(K)));
    kb.store(ms, l.arg("ms"), m);
    kb.store(ms, row, tid);
  });
  kb.when(kb.lt(tid, kb.idx(N)), [&] {
    kb.store(sum, l.arg("h"), kb.add(kb.mul(m, kb.idx(N)), tid));
    kb.store(sum, row, tid);
  });
}

void mlir::mhc::emitTokenScale(
    KernelBuilder &kb, const ::mhc::KernelSpec &spec, LaunchBuilder &l, Value m,
    Value row, StringRef post, function_ref<std::pair<Value, Value>()> alphaBeta,
    function_ref<void(Value, Value)> keepPre,
    function_ref<void(Value, Value)> keepLogit) {
  int64_t n = spec.n, N = 2 * n + n * n;
  Value tid = kb.threadId();
  kb.when(kb.lt(tid, kb.idx(N)), [&] {
    Value r = scaleRsqrt(kb, spec, kb.load(row, kb.idx(N)));
    auto [a, beta] = alphaBeta();
    Value z = scaleLogit(kb, a, kb.load(row, tid), r, beta);
    Value mn = kb.mul(m, kb.idx(n));
    kb.when(kb.lt(tid, kb.idx(n)), [&] {
      Value v = scaleSquash(kb, spec, z, /*pre=*/true);
      kb.store(v, l.arg("pre"), kb.add(mn, tid));
      keepPre(tid, v);
    });
    kb.when(kb.andi(kb.lt(kb.idx(n - 1), tid), kb.lt(tid, kb.idx(2 * n))), [&] {
      kb.store(scaleSquash(kb, spec, z, /*pre=*/false), l.arg(post.str()),
               kb.add(mn, kb.sub(tid, kb.idx(n))));
    });
    kb.when(kb.lt(kb.idx(2 * n - 1), tid), [&] {
      Value k = kb.sub(tid, kb.idx(2 * n));
      kb.store(z, l.arg("logits"), kb.add(kb.mul(m, kb.idx(n * n)), k));
      keepLogit(k, z);
    });
  });
}

std::pair<Value, Value> mlir::mhc::loadScaleParams(KernelBuilder &kb,
                                                   const ::mhc::KernelSpec &spec,
                                                   LaunchBuilder &l) {
  int64_t n = spec.n, N = 2 * n + n * n;
  Value k = kb.min(kb.threadId(), kb.idx(N - 1));
  return {kb.toF32(kb.load(l.arg("alpha"), scaleSegment(kb, n, k))),
          kb.toF32(kb.load(l.arg("beta"), k))};
}

void mlir::mhc::emitTokenSinkhorn(KernelBuilder &kb, const ::mhc::KernelSpec &spec,
                                  LaunchBuilder &l, Value m, Value logitsS,
                                  Value at, StringRef P) {
  int64_t n = spec.n;
  SmallVector<Value> L;
  for (int64_t k = 0; k < n * n; ++k)
    L.push_back(kb.load(logitsS, kb.add(at, kb.idx(k))));
  emitSinkhornPlan(kb, spec, L, [&](ArrayRef<Value> plan) {
    for (int64_t k = 0; k < n * n; ++k)
      kb.store(plan[k], l.arg(P.str()), kb.add(kb.mul(m, kb.idx(n * n)), kb.idx(k)));
  });
}
