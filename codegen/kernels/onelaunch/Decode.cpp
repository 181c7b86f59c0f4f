//===- Decode.cpp - the one-launch kernel's decode path -------------------===//
//
// M <= tile (docs/design/serve.md, phase 2): no second grid barrier. Every
// block sums pre's columns of every token itself (the owners' order: the
// same bits) and writes y on its slice from the x_next that phase 1 left in
// shared memory, while warp 0 runs its own tokens' Sinkhorns.
//
//===----------------------------------------------------------------------===//

#include "kernels/Kernels.h"
#include "kernels/onelaunch/Phases.h"

using namespace mlir;
using namespace mlir::mhc;
using namespace mlir::mhc::onelaunch;

void onelaunch::decodePre(KernelContext &ctx, LaunchBuilder &l,
                          KernelBuilder &kb, const Plan &p, Value fin2,
                          Value preS, Value abS) {
  int64_t n = ctx.n(), N = ctx.N(), K = ctx.K(), R = p.finishRows, cols = n + 1;
  int64_t B = finishRowBlocks(p), U = B <= kFinishLoads ? 2 : 1;
  Value tid = kb.threadId(), M = l.tokens();
  Value tasks = kb.mul(M, kb.idx(cols * R)); // task = (m cols + cc) R + r
  kb.loop(kb.idx(0), tasks, kb.idx(U * kThreads), [&](Value t0) {
    SmallVector<Value> task, item, r;
    for (int64_t u = 0; u < U; ++u) {
      task.push_back(kb.add(t0, kb.add(tid, kb.idx(u * kThreads))));
      Value tc = kb.min(task[u], kb.sub(tasks, kb.idx(1)));
      Value rest = kb.div(tc, kb.idx(R)), cc = kb.rem(rest, kb.idx(cols));
      Value col = kb.select(kb.lt(cc, kb.idx(n)), cc, kb.idx(N));
      r.push_back(kb.rem(tc, kb.idx(R)));
      item.push_back(kb.add(kb.mul(kb.div(rest, kb.idx(cols)), kb.idx(p.width)), col));
    }
    SmallVector<Value> sums;
    if (U == 1) {
      sums.push_back(rowSum(l, kb, p, item[0], r[0]));
    } else {
      SmallVector<SmallVector<Value>> loads;
      for (int64_t u = 0; u < U; ++u)
        loads.push_back(rowLoads(l, kb, p, item[u], r[u], 0, B));
      for (int64_t u = 0; u < U; ++u)
        sums.push_back(addInOrder(kb, Value(), loads[u]));
    }
    for (int64_t u = 0; u < U; ++u)
      kb.when(kb.lt(task[u], tasks), [&] { kb.store(sums[u], fin2, task[u]); });
  });
  kb.barrier();
  kb.loop(tid, kb.mul(M, kb.idx(n)), kb.idx(kThreads), [&](Value e) {
    Value m = kb.div(e, kb.idx(n)), i = kb.rem(e, kb.idx(n));
    auto total = [&](Value cc) {
      Value at = kb.mul(kb.add(kb.mul(m, kb.idx(cols)), cc), kb.idx(R));
      Value sum = kb.load(fin2, at);
      for (int64_t rr = 1; rr < R; ++rr)
        sum = kb.add(sum, kb.load(fin2, kb.add(at, kb.idx(rr))));
      return sum;
    };
    Value ms = kb.div(total(kb.idx(n)), kb.f32(static_cast<double>(K)));
    Value rs = scaleRsqrt(kb, ctx.spec, ms);
    Value alpha = kb.load(abS, kb.mul(i, kb.idx(2)));
    Value beta = kb.load(abS, kb.add(kb.mul(i, kb.idx(2)), kb.idx(1)));
    Value z = scaleLogit(kb, alpha, total(i), rs, beta);
    kb.store(scaleSquash(kb, ctx.spec, z, /*pre=*/true), preS, e);
  });
  kb.barrier();
}

void onelaunch::writeYShared(KernelContext &ctx, LaunchBuilder &l,
                             KernelBuilder &kb, Phase1 &p1, Value preS,
                             int64_t firstThread) {
  int64_t n = ctx.n(), C = ctx.C();
  Value M = l.tokens(), tid = kb.threadId();
  kb.when(kb.lt(kb.idx(firstThread - 1), tid), [&] {
  kb.loop(kb.sub(tid, kb.idx(firstThread)), kb.idx(p1.p.tile * p1.p.cntMax),
          kb.idx(kThreads - firstThread), [&](Value item) {
    auto [m, cl] = p1.stageItem(item);
    kb.when(kb.andi(kb.lt(m, M), kb.lt(cl, p1.cnt)), [&] {
      Value acc;
      for (int64_t i = 0; i < n; ++i) {
        Value pre = kb.load(preS, kb.add(kb.mul(m, kb.idx(n)), kb.idx(i)));
        Value x = kb.load(p1.xs, p1.xsAt(p1.localCol(i, cl), cl, m));
        acc = i == 0 ? kb.mul(pre, x) : kb.fma(pre, x, acc);
      }
      kb.storeFrom({acc}, l.arg("y"), kb.add(kb.mul(m, kb.idx(C)), kb.add(p1.c0, cl)));
    });
  });
  });
}
