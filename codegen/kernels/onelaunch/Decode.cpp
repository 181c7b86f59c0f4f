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

/// The sum of a column's R row sums in row order (sumPartials' order) from
/// a [tokens][cols][R] buffer of the decode path: token t, column cc.
static Value decodeTotal(KernelBuilder &kb, const Plan &p, Value buf, Value t, int64_t cols,
                  Value cc) {
  Value at = kb.mul(kb.add(kb.mul(t, kb.idx(cols)), cc), kb.idx(p.finishRows));
  Value sum = kb.load(buf, at);
  for (int64_t rr = 1; rr < p.finishRows; ++rr)
    sum = kb.add(sum, kb.load(buf, kb.add(at, kb.idx(rr))));
  return sum;
}

int64_t onelaunch::ownTokens(const Plan &p) { return (p.tile + p.G - 1) / p.G; }

void onelaunch::decodeSums(KernelContext &ctx, LaunchBuilder &l, KernelBuilder &kb,
                const Plan &p, Value fin2, Value finOwn, Value preS, Value abS) {
  int64_t n = ctx.n(), N = ctx.N(), K = ctx.K(), R = p.finishRows, cols = n + 1;
  int64_t B = finishRowBlocks(p), U = B <= kFinishLoads ? 2 : 1, rest = N - n;
  Value tid = kb.threadId(), M = l.tokens(), bid = kb.blockId();
  // task < pre: (m cols + cc) R + r; past it: (k rest + jj) R + r, column n + jj
  // of token bid + k G, for the block's tokens below M.
  Value pre = kb.mul(M, kb.idx(cols * R));
  Value own = kb.select(kb.lt(bid, M),
                        kb.div(kb.add(kb.sub(M, bid), kb.idx(p.G - 1)), kb.idx(p.G)),
                        kb.idx(0));
  Value tasks = kb.add(pre, kb.mul(own, kb.idx(rest * R)));
  kb.loop(kb.idx(0), tasks, kb.idx(U * kThreads), [&](Value t0) {
    SmallVector<Value> task, item, r, mine;
    for (int64_t u = 0; u < U; ++u) {
      task.push_back(kb.add(t0, kb.add(tid, kb.idx(u * kThreads))));
      Value tc = kb.min(task[u], kb.sub(tasks, kb.idx(1)));
      mine.push_back(kb.lt(kb.sub(pre, kb.idx(1)), tc));
      Value ta = kb.min(tc, kb.sub(pre, kb.idx(1)));
      Value ra = kb.div(ta, kb.idx(R)), cc = kb.rem(ra, kb.idx(cols));
      Value col = kb.select(kb.lt(cc, kb.idx(n)), cc, kb.idx(N));
      Value itemA = kb.add(kb.mul(kb.div(ra, kb.idx(cols)), kb.idx(p.width)), col);
      Value tb = kb.sub(kb.max(tc, pre), pre);
      Value rb = kb.div(tb, kb.idx(R));
      Value m = kb.add(bid, kb.mul(kb.div(rb, kb.idx(rest)), kb.idx(p.G)));
      Value itemB = kb.add(kb.mul(m, kb.idx(p.width)), kb.add(kb.rem(rb, kb.idx(rest)), kb.idx(n)));
      r.push_back(kb.rem(tc, kb.idx(R)));
      item.push_back(kb.select(mine[u], itemB, itemA));
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
      kb.when(kb.lt(task[u], tasks), [&] {
        kb.when(mine[u], [&] { kb.store(sums[u], finOwn, kb.sub(task[u], pre)); });
        kb.when(kb.lt(task[u], pre), [&] { kb.store(sums[u], fin2, task[u]); });
      });
  });
  kb.barrier();
  kb.loop(tid, kb.mul(M, kb.idx(n)), kb.idx(kThreads), [&](Value e) {
    Value m = kb.div(e, kb.idx(n)), i = kb.rem(e, kb.idx(n));
    Value ms = kb.div(decodeTotal(kb, p, fin2, m, cols, kb.idx(n)),
                      kb.f32(static_cast<double>(K)));
    Value rs = scaleRsqrt(kb, ctx.spec, ms);
    Value alpha = kb.load(abS, kb.mul(i, kb.idx(2)));
    Value beta = kb.load(abS, kb.add(kb.mul(i, kb.idx(2)), kb.idx(1)));
    Value z = scaleLogit(kb, alpha, decodeTotal(kb, p, fin2, m, cols, i), rs, beta);
    kb.store(scaleSquash(kb, ctx.spec, z, /*pre=*/true), preS, e);
  });
  kb.barrier();
}

void onelaunch::decodeFinish(KernelContext &ctx, LaunchBuilder &l, KernelBuilder &kb,
                  const Names &names, const Plan &p, Value m, Value k, Value fin2,
                  Value finOwn, Value row, Value logitsS, Value at,
                  std::pair<Value, Value> ab) {
  int64_t n = ctx.n(), N = ctx.N(), cols = n + 1;
  Value tid = kb.threadId();
  kb.when(kb.lt(tid, kb.idx(p.width)), [&] {
    Value isPre = kb.lt(tid, kb.idx(n)), isMs = kb.eq(tid, kb.idx(N));
    Value cc = kb.select(isMs, kb.idx(n), kb.min(tid, kb.idx(n)));
    Value jj = kb.sub(kb.min(kb.max(tid, kb.idx(n)), kb.idx(N - 1)), kb.idx(n));
    Value fromFin2 = decodeTotal(kb, p, fin2, m, cols, cc);
    Value fromOwn = decodeTotal(kb, p, finOwn, k, N - n, jj);
    Value sum = kb.select(isPre, fromFin2, kb.select(isMs, fromFin2, fromOwn));
    storeTokenSum(ctx, l, kb, m, row, sum);
  });
  kb.barrier();
  emitTokenScale(
      kb, ctx.spec, l, m, row, names.post, [&] { return ab; }, [](Value, Value) {},
      [&](Value c, Value z) { kb.store(z, logitsS, kb.add(at, c)); });
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
