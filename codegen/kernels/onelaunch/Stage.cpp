//===- Stage.cpp - the one-launch kernel's stage: x_next into xs ----------===//
//
// Phase 1's first half (docs/design/serve.md): where a token's values are
// (global x, the block's local columns, xs's quads), and the stage that
// brings a tile's x_next on the block's channels into shared memory (the
// seam: combineStream from layer l's x, f, post and P; stored as x_next),
// with phi's slice (and weight) into shared memory on the first tile.
//
//===----------------------------------------------------------------------===//

#include "builder/Streams.h"
#include "kernels/onelaunch/Phases.h"

#include <numeric>

using namespace mlir;
using namespace mlir::mhc;
using namespace mlir::mhc::onelaunch;

/// Global index of x's element (token m, stream i, channel c).
Value Phase1::xIndex(Value m, int64_t i, Value c) {
  int64_t n = ctx.n(), C = ctx.C();
  Value base = kb.mul(m, kb.idx(n * C));
  if (ctx.spec.layout == ::mhc::Layout::NC)
    return kb.add(base, kb.add(kb.idx(i * C), c));
  return kb.add(base, kb.add(kb.mul(c, kb.idx(n)), kb.idx(i)));
}

/// The local column of (stream i, local channel cl).
Value Phase1::localCol(int64_t i, Value cl) {
  if (ctx.spec.layout == ::mhc::Layout::NC)
    return kb.add(kb.idx(i * p.cntMax), cl);
  return kb.add(kb.mul(cl, kb.idx(ctx.n())), kb.idx(i));
}

/// Local column kl's projection column k (clamped to 0 outside the
/// slice) and whether it is inside (kl < L, its channel < cnt).
std::pair<Value, Value> Phase1::globalCol(Value kl) {
  int64_t n = ctx.n(), C = ctx.C();
  bool nc = ctx.spec.layout == ::mhc::Layout::NC;
  Value i = nc ? kb.div(kl, kb.idx(p.cntMax)) : kb.rem(kl, kb.idx(n));
  Value cl = nc ? kb.rem(kl, kb.idx(p.cntMax)) : kb.div(kl, kb.idx(n));
  Value inside = kb.andi(kb.lt(kl, kb.idx(p.L)), kb.lt(cl, cnt));
  Value k = nc ? kb.add(kb.mul(i, kb.idx(C)), kb.add(c0, cl))
               : kb.add(kb.mul(c0, kb.idx(n)), kl);
  return {kb.select(inside, k, kb.idx(0)), inside};
}

/// phi's column j at local column kl (0 outside the slice), from global.
Value Phase1::phiGlobal(Value j, Value kl) {
  auto [k, inside] = globalCol(kl);
  Value v = kb.toF32(kb.load(l.arg("phi"), kb.add(kb.mul(j, kb.idx(ctx.K())), k)));
  return kb.select(inside, v, kb.f32(0.0));
}

/// Once per launch, first: xs zeroed (the padding columns stay zero).
void Phase1::zeroXs() {
  Value tid = kb.threadId();
  kb.loop(tid, kb.idx(p.tile * p.Lp), kb.idx(kThreads),
          [&](Value e) { kb.store(kb.f32(0.0), xs, e); });
  kb.barrier();
}

/// Once per launch, inside the first tile's stage (after its loads are
/// issued, so both round trips overlap): the block's phi slice (and
/// weight) into shared memory, coalesced, each thread's loads (24 at a
/// time; 12 for n >= 5, whose stage holds more loaded values: no spills
/// at 255 registers) issued before its stores; the stage's last barrier
/// orders them before the pass.
void Phase1::stagePhiSlice() {
  Value tid = kb.threadId();
  if (!p.stagePhi)
    return;
  const int64_t kBatch = ctx.n() <= 4 ? 24 : 12;
  int64_t elems = ctx.N() * p.Lp, chunk = kBatch * kThreads;
  kb.loop(kb.idx(0), kb.idx(elems), kb.idx(chunk), [&](Value e0) {
    SmallVector<Value> v, at;
    for (int64_t u = 0; u < kBatch; ++u) {
      Value e = kb.add(e0, kb.add(tid, kb.idx(u * kThreads)));
      Value ec = kb.min(e, kb.idx(elems - 1));
      Value j = kb.div(ec, kb.idx(p.Lp)), kl = kb.rem(ec, kb.idx(p.Lp));
      v.push_back(phiGlobal(j, kl));
      at.push_back(kb.add(kb.mul(j, kb.idx(p.Ls)), kl));
    }
    for (int64_t u = 0; u < kBatch; ++u) {
      Value e = kb.add(e0, kb.add(tid, kb.idx(u * kThreads)));
      kb.when(kb.lt(e, kb.idx(elems)), [&] { kb.store(v[u], phiS, at[u]); });
    }
  });
  if (ctx.spec.hasWeight)
    kb.loop(tid, kb.idx(p.Lp), kb.idx(kThreads), [&](Value kl) {
      auto [k, inside] = globalCol(kl);
      Value w = kb.toF32(kb.load(l.arg("weight"), k));
      kb.store(kb.select(inside, w, kb.f32(0.0)), wS, kl);
    });
}

/// The local channel of local column kl (CN: kl / n; NC: kl mod cntMax).
Value Phase1::localChannel(Value kl) {
  if (ctx.spec.layout == ::mhc::Layout::NC)
    return kb.rem(kl, kb.idx(p.cntMax));
  return kb.div(kl, kb.idx(ctx.n()));
}

/// xs's element of local column kl (local channel cl), tile token tm:
/// row kl holds the tile's quads of tokens rotated by cl mod Q, so that a
/// warp of the stage (quads on 8 channels, one stream) stores into 16
/// banks or more; a quad stays 16 contiguous bytes for the pass.
Value Phase1::xsAt(Value kl, Value cl, Value tm) {
  Value q = kb.div(tm, kb.idx(p.quad)), tq = kb.rem(tm, kb.idx(p.quad));
  Value slot = p.Q == 1 ? kb.idx(0) : kb.rem(kb.add(q, cl), kb.idx(p.Q));
  return kb.add(kb.mul(kl, kb.idx(p.tile)), kb.add(kb.mul(slot, kb.idx(p.quad)), tq));
}

/// Token m's n values at channel c of a stream buffer (x, x_next), as
/// f32: CN in the widest aligned pieces of the n contiguous values.
SmallVector<Value> Phase1::loadToken(Value mem, Value m, Value c) {
  int64_t n = ctx.n();
  SmallVector<Value> out;
  if (ctx.spec.layout == ::mhc::Layout::NC) {
    for (int64_t i = 0; i < n; ++i)
      out.push_back(kb.toF32(kb.load(mem, xIndex(m, i, c))));
    return out;
  }
  int64_t piece = std::gcd<int64_t>(n, 16 / ::mhc::byteWidth(ctx.spec.act));
  Value base = xIndex(m, 0, c);
  for (int64_t i = 0; i < n; i += piece)
    out.append(kb.loadF32(mem, kb.add(base, kb.idx(i)), piece));
  return out;
}

void Phase1::storeToken(ArrayRef<Value> v, Value mem, Value m, Value c) {
  int64_t n = ctx.n();
  if (ctx.spec.layout == ::mhc::Layout::NC) {
    for (int64_t i = 0; i < n; ++i)
      kb.storeFrom({v[i]}, mem, xIndex(m, i, c));
    return;
  }
  int64_t piece = std::gcd<int64_t>(n, 16 / ::mhc::byteWidth(ctx.spec.act));
  Value base = xIndex(m, 0, c);
  for (int64_t i = 0; i < n; i += piece)
    kb.storeFrom(v.slice(i, piece), mem, kb.add(base, kb.idx(i)));
}

/// Stage item -> (tile token tm, local channel cl): item = tq + quad (cl
/// + cntMax q), tm = q quad + tq: a warp covers quads of tokens on 8
/// consecutive channels, a thread's n values one vector access (CN).
std::pair<Value, Value> Phase1::stageItem(Value item) {
  Value tq = kb.rem(item, kb.idx(p.quad)), rest = kb.div(item, kb.idx(p.quad));
  Value cl = kb.rem(rest, kb.idx(p.cntMax)), q = kb.div(rest, kb.idx(p.cntMax));
  return {kb.add(kb.mul(q, kb.idx(p.quad)), tq), cl};
}

/// The tile's live tokens (m0 .. m0 + live) on the block's channels into
/// xs (xsAt); xs rows past `live` keep older finite values, which only
/// the discarded sums of those tokens read. Each thread loads x (and f)
/// of up to kStageItems items and its share of the tokens' post and P
/// (into mixS) before computing any: one round trip per kStageItems *
/// kThreads items (the first with phi's slice: stagePhiSlice).
void Phase1::stage(Value m0, Value live) {
  Value first = kb.eq(m0, kb.idx(0));
  int64_t n = ctx.n();
  Value tid = kb.threadId();
  if (expand)
    stageMix(m0, live);
  int64_t items = p.tile * p.cntMax;
  int64_t U = std::min<int64_t>((items + kThreads - 1) / kThreads, kStageItems);
  kb.loop(kb.idx(0), kb.idx(items), kb.idx(U * kThreads), [&](Value i0) {
    struct Item { Value ok, tm, cl, m, c, fb; SmallVector<Value> x; };
    SmallVector<Item> its(U);
    for (int64_t u = 0; u < U; ++u) {
      Item &it = its[u];
      auto [tm, cl] = stageItem(kb.add(i0, kb.add(tid, kb.idx(u * kThreads))));
      it.ok = kb.andi(kb.lt(tm, live), kb.lt(cl, cnt));
      it.tm = kb.select(it.ok, tm, kb.idx(0)), it.cl = kb.select(it.ok, cl, kb.idx(0));
      it.m = kb.add(m0, it.tm), it.c = kb.add(c0, it.cl);
      it.x = loadToken(l.arg(names.x), it.m, it.c);
      if (expand) {
        it.fb = kb.toF32(kb.load(l.arg("f"), kb.add(kb.mul(it.m, kb.idx(ctx.C())), it.c)));
        if (ctx.spec.hasBias)
          it.fb = kb.add(it.fb, kb.toF32(kb.load(l.arg("bias"), it.c)));
      }
    }
    if (p.stagePhi)
      kb.when(kb.andi(first, kb.eq(i0, kb.idx(0))), [&] { stagePhiSlice(); });
    if (expand)
      kb.barrier(); // mixS
    for (Item &it : its)
      kb.when(it.ok, [&] {
        SmallVector<Value> xn = expand ? combined(it.tm, it.x, it.fb) : it.x;
        for (int64_t i = 0; i < n; ++i)
          kb.store(xn[i], xs, xsAt(localCol(i, it.cl), it.cl, it.tm));
        if (expand)
          storeToken(xn, l.arg("x_next"), it.m, it.c);
      });
  });
  kb.barrier();
}

/// The seam: post and P of the tile's live tokens into mixS ([tile][n +
/// n * n]), loaded before any thread's x (no barrier here: stage's).
void Phase1::stageMix(Value m0, Value live) {
  int64_t n = ctx.n(), per = n + n * n;
  Value tid = kb.threadId(), count = kb.mul(live, kb.idx(per));
  for (int64_t v = 0; v * kThreads < p.tile * per; ++v) {
    Value e = kb.add(tid, kb.idx(v * kThreads));
    Value ec = kb.min(e, kb.sub(count, kb.idx(1)));
    Value tm = kb.div(ec, kb.idx(per)), r = kb.rem(ec, kb.idx(per));
    Value m = kb.add(m0, tm);
    Value isPost = kb.lt(r, kb.idx(n));
    Value rp = kb.min(r, kb.idx(n - 1));
    Value rP = kb.sub(kb.max(r, kb.idx(n)), kb.idx(n));
    Value post = kb.load(l.arg("post"), kb.add(kb.mul(m, kb.idx(n)), rp));
    Value P = kb.load(l.arg("P"), kb.add(kb.mul(m, kb.idx(n * n)), rP));
    Value val = kb.select(isPost, post, P);
    kb.when(kb.lt(e, count), [&] { kb.store(val, mixS, e); });
  }
}

/// x_next's n values of the tile's token tm from layer l's x (f32) and
/// f (+ bias), post and P from mixS, as f32 after the rounding to the
/// activation type that storing them does.
SmallVector<Value> Phase1::combined(Value tm, ArrayRef<Value> xl, Value fb) {
  int64_t n = ctx.n(), per = n + n * n;
  Value base = kb.mul(tm, kb.idx(per));
  SmallVector<Value> post, P;
  for (int64_t j = 0; j < n; ++j)
    post.push_back(kb.load(mixS, kb.add(base, kb.idx(j))));
  for (int64_t k = 0; k < n * n; ++k)
    P.push_back(kb.load(mixS, kb.add(base, kb.idx(n + k))));
  Type act = elementType(kb.b.getContext(), ctx.spec.act);
  SmallVector<Value> out;
  for (int64_t j = 0; j < n; ++j) {
    Value v = combineStream(kb, n, j, post, P, fb,
                            [&](int64_t i) { return xl[i]; });
    out.push_back(kb.toF32(kb.toType(v, act)));
  }
  return out;
}
