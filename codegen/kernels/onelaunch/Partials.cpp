//===- Partials.cpp - the one-launch kernel's split-K partials ------------===//
//
// Phase 1's second half (docs/design/serve.md): each block's partials of h
// and of the sum of squares over its channel slice, from xs (and phi's
// slice), summed by thread groups in a fixed order into partials
// [M, N + 1, G].
//
//===----------------------------------------------------------------------===//

#include "kernels/onelaunch/Phases.h"

using namespace mlir;
using namespace mlir::mhc;
using namespace mlir::mhc::onelaunch;

/// Tile tokens 0 .. tokens of local column kl from xs, a quad per
/// 16-byte load.
SmallVector<Value> Phase1::xsTokens(Value kl, int64_t tokens) {
  Value cl = p.Q == 1 ? kb.idx(0) : localChannel(kl);
  SmallVector<Value> x;
  for (int64_t tm = 0; tm < tokens; tm += p.quad) {
    Value at = xsAt(kl, cl, kb.idx(tm));
    int64_t count = std::min(p.quad, tokens - tm);
    if (count == 4) {
      Value vec = kb.vload(xs, at, 4);
      for (int64_t u = 0; u < 4; ++u)
        x.push_back(kb.extract(vec, u));
    } else {
      for (int64_t u = 0; u < count; ++u)
        x.push_back(kb.load(xs, kb.add(at, kb.idx(u))));
    }
  }
  return x;
}

/// One pass: thread (g, j) sums column j of phi . (x_next * w) (or, for
/// `squares`, the squares of x_next) of tile tokens 0 .. tokens over
/// local columns g, g + groups, ... into red.
void Phase1::pass(Value g, Value j, int64_t tokens, bool squares) {
  Value row = squares ? Value() : kb.mul(j, kb.idx(p.Ls));
  SmallVector<Value> init(tokens, kb.f32(0.0));
  SmallVector<Value> acc = kb.loop(
      kb.idx(0), kb.idx(p.T), kb.idx(1), init,
      [&](Value t, ValueRange it) -> SmallVector<Value> {
        Value kl = kb.add(g, kb.mul(t, kb.idx(p.groups)));
        Value ph, wk;
        if (!squares) {
          ph = p.stagePhi ? kb.load(phiS, kb.add(row, kl)) : phiGlobal(j, kl);
          if (ctx.spec.hasWeight)
            wk = p.stagePhi ? kb.load(wS, kl)
                            : kb.toF32(kb.load(l.arg("weight"), globalCol(kl).first));
        }
        SmallVector<Value> x = xsTokens(kl, tokens), next;
        for (int64_t u = 0; u < tokens; ++u)
          next.push_back(squares ? kb.fma(x[u], x[u], it[u])
                                 : kb.fma(ph, wk ? kb.mul(x[u], wk) : x[u], it[u]));
        return next;
      });
  for (int64_t u = 0; u < tokens; ++u)
    kb.store(acc[u], red,
             kb.add(kb.mul(kb.add(kb.mul(g, kb.idx(p.tile)), kb.idx(u)), kb.idx(p.width)), j));
}

/// The tile's partials: passes over the tile's live tokens, then the
/// groups' sums added in group order into partials [M, N + 1, G]. The
/// threads: (g, j < N) as tid = g N + j, then the groups' squares (j =
/// N), so that one warp at most runs both kinds of pass.
void Phase1::partials(Value m0, Value live, Value bid) {
  int64_t width = p.width, N = ctx.N(), colThreads = p.groups * N;
  Value tid = kb.threadId();
  Value isCol = kb.lt(tid, kb.idx(colThreads));
  Value g = kb.select(isCol, kb.div(tid, kb.idx(N)), kb.sub(tid, kb.idx(colThreads)));
  Value j = kb.select(isCol, kb.rem(tid, kb.idx(N)), kb.idx(N));
  // One pass over the columns: 4 tokens where the tile has <= 4 live
  // (decode), else the whole tile (16 accumulators; its loads in flight).
  auto passes = [&](bool squares) {
    if (p.tile <= p.pass) {
      pass(g, j, p.tile, squares);
      return;
    }
    kb.when(kb.lt(live, kb.idx(p.pass + 1)), [&] { pass(g, j, p.pass, squares); });
    kb.when(kb.lt(kb.idx(p.pass), live), [&] { pass(g, j, p.tile, squares); });
  };
  kb.when(isCol, [&] { passes(false); });
  kb.when(kb.andi(kb.lt(kb.idx(colThreads - 1), tid),
                  kb.lt(tid, kb.idx(colThreads + p.groups))),
          [&] { passes(true); });
  kb.barrier();
  // Item (tm, j) adds the groups in order and stores the partial.
  kb.loop(tid, kb.mul(live, kb.idx(width)), kb.idx(kThreads), [&](Value item) {
    Value tm = kb.div(item, kb.idx(width)), col = kb.rem(item, kb.idx(width));
    Value m = kb.add(m0, tm);
    auto at = [&](int64_t gg) {
      return kb.add(kb.mul(kb.add(kb.idx(gg * p.tile), tm), kb.idx(width)), col);
    };
    Value sum = kb.load(red, at(0));
    for (int64_t gg = 1; gg < p.groups; ++gg)
      sum = kb.add(sum, kb.load(red, at(gg)));
    Value to = kb.add(kb.mul(kb.add(kb.mul(m, kb.idx(width)), col), kb.idx(p.G)), bid);
    kb.store(sum, l.arg("partials"), to);
  });
  kb.barrier();
}
