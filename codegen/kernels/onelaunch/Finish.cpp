//===- Finish.cpp - the one-launch kernel past the tile -------------------===//
//
// The path of M > tile (docs/design/serve.md, phases 3-5), and the scale
// and Sinkhorn of one token that the decode path shares: tokens b, b + G,
// ... of block b summed over the G slices, scaled and their Sinkhorn run
// (the pre tail's helpers); after the grid barrier, y = pre . x_next on the
// block's slice for every token.
//
//===----------------------------------------------------------------------===//

#include "kernels/Kernels.h"
#include "kernels/onelaunch/Phases.h"

using namespace mlir;
using namespace mlir::mhc;
using namespace mlir::mhc::onelaunch;

namespace {

/// Phase 3's sum of token m's partials over the G slices: thread (r, col)
/// sums its row (rowLoads), the rows' sums are then added in row order: h
/// and ms into `row`.
void sumPartials(KernelContext &ctx, LaunchBuilder &l, KernelBuilder &kb,
                 const Plan &p, Value m, Value fin, Value row) {
  int64_t width = p.width, R = p.finishRows;
  Value tid = kb.threadId();
  Value col = kb.rem(tid, kb.idx(width)), r = kb.div(tid, kb.idx(width));
  kb.when(kb.lt(r, kb.idx(R)), [&] {
    // Opaque: the B addresses stay in the token loop's body (hoisted, they
    // would be live across the Sinkhorn thread's n x n plan).
    Value item = kb.opaque(kb.add(kb.mul(m, kb.idx(width)), col));
    Value sum = rowSum(l, kb, p, item, r);
    kb.store(sum, fin, kb.add(kb.mul(r, kb.idx(width)), col));
  });
  kb.barrier();
  kb.when(kb.lt(tid, kb.idx(width)), [&] {
    Value sum = kb.load(fin, tid);
    for (int64_t rr = 1; rr < R; ++rr)
      sum = kb.add(sum, kb.load(fin, kb.add(kb.idx(rr * width), tid)));
    storeTokenSum(ctx, l, kb, m, row, sum);
  });
  kb.barrier();
}

} // namespace

void onelaunch::finishScale(KernelContext &ctx, LaunchBuilder &l,
                            KernelBuilder &kb, const Names &names,
                            const Plan &p, Value m, Value fin, Value row,
                            Value logitsS, Value at,
                            std::pair<Value, Value> ab) {
  sumPartials(ctx, l, kb, p, m, fin, row);
  emitTokenScale(
      kb, ctx.spec, l, m, row, names.post, [&] { return ab; }, [](Value, Value) {},
      [&](Value k, Value z) { kb.store(z, logitsS, kb.add(at, k)); });
  kb.barrier();
}

void onelaunch::sinkhornToken(KernelContext &ctx, LaunchBuilder &l,
                              KernelBuilder &kb, const Names &names, Value m,
                              Value logitsS, Value at) {
  emitTokenSinkhorn(kb, ctx.spec, l, m, logitsS, at, names.P);
}

void onelaunch::finishToken(KernelContext &ctx, LaunchBuilder &l,
                            KernelBuilder &kb, const Names &names,
                            const Plan &p, Value m, Value fin, Value row,
                            Value mix, std::pair<Value, Value> ab) {
  finishScale(ctx, l, kb, names, p, m, fin, row, mix, kb.idx(0), ab);
  kb.when(kb.eq(kb.threadId(), kb.idx(0)),
          [&] { sinkhornToken(ctx, l, kb, names, m, mix, kb.idx(0)); });
  kb.barrier(); // row and mix are reused by the block's next token
}

void onelaunch::writeY(KernelContext &ctx, LaunchBuilder &l, KernelBuilder &kb,
                       Phase1 &p1, const char *xn) {
  int64_t n = ctx.n(), C = ctx.C(), cntMax = p1.p.cntMax, U = kStageItems;
  Value M = l.tokens(), tid = kb.threadId();
  Value items = kb.mul(M, kb.idx(cntMax));
  kb.loop(kb.idx(0), items, kb.idx(U * kThreads), [&](Value i0) {
    SmallVector<Value> ok, m, c;
    SmallVector<SmallVector<Value>> pre(U), x(U);
    for (int64_t u = 0; u < U; ++u) {
      Value item = kb.add(i0, kb.add(tid, kb.idx(u * kThreads)));
      Value mu = kb.div(item, kb.idx(cntMax)), cl = kb.rem(item, kb.idx(cntMax));
      ok.push_back(kb.andi(kb.lt(mu, M), kb.lt(cl, p1.cnt)));
      m.push_back(kb.select(ok[u], mu, kb.idx(0)));
      c.push_back(kb.add(p1.c0, kb.select(ok[u], cl, kb.idx(0))));
      for (int64_t i = 0; i < n; ++i)
        pre[u].push_back(kb.load(l.arg("pre"), kb.add(kb.mul(m[u], kb.idx(n)), kb.idx(i))));
      x[u] = p1.loadToken(l.arg(xn), m[u], c[u]);
    }
    for (int64_t u = 0; u < U; ++u)
      kb.when(ok[u], [&] {
        Value acc;
        for (int64_t i = 0; i < n; ++i)
          acc = i == 0 ? kb.mul(pre[u][i], x[u][i]) : kb.fma(pre[u][i], x[u][i], acc);
        kb.storeFrom({acc}, l.arg("y"), kb.add(kb.mul(m[u], kb.idx(C)), c[u]));
      });
  });
}
