//===- OneLaunch.cpp - pre.fwd / post_pre.fwd in one cooperative launch ---===//
//
// The decode-size forward (docs/design/serve.md): a fixed grid of G
// co-resident blocks, each owning a channel slice of C, runs
//   1. for every token: x_next on its slice (the seam: expand_combine's
//      combineStream from layer l's x, f, post, P; the pre step: x itself),
//      stored, and its split-K partials of h and the sum of squares over the
//      slice (a fixed-order block sum) into partials [G, M, N + 1];
//   grid barrier;
//   2. tokens b, b + G, ...: the partials summed over the G slices in order,
//      then scale and Sinkhorn (the pre tail's helpers): h, ms, pre, post,
//      logits, P;
//   grid barrier;
//   3. y = pre . x_next on its slice for every token (it reads back only the
//      x_next it stored itself).
// Integer atomics only (SimtBuilder::gridBarrier); no float atomics.
//
//===----------------------------------------------------------------------===//

#include "builder/Streams.h"
#include "kernels/Kernels.h"
#include "kernels/project/Project.h"
#include "kernels/seam/Contract.h"

using namespace mlir;
using namespace mlir::mhc;
using ::mhc::BufferRole;
using ::mhc::DType;

namespace {

constexpr int kThreads = 256;
/// Tokens whose x_next slices phase 1 keeps in shared memory at once: each
/// phi value loaded serves this many tokens.
constexpr int64_t kTileTokens = 8;


/// Names of the buffers the kernel reads and writes (the seam's contract
/// renames pre's post and P).
struct Names {
  const char *x, *post, *P;
};

/// Tokens per phase-1 tile: kTileTokens, fewer where their slices would
/// pass the slice limit (a very wide C).
int64_t tileTokens(const KernelContext &ctx) {
  int64_t slice = ::mhc::oneLaunchSliceBytes(ctx.spec);
  return std::clamp<int64_t>(::mhc::kOneLaunchMaxSliceBytes / slice, 1, kTileTokens);
}

/// Phase 1 for one tile of tokens: x_next of the block's channels [c0, c0 +
/// cnt) into shared `xs` ([kTileTokens][n * cntMax], stream-major, zeros
/// past M), then the block's partials of those tokens.
struct Phase1 {
  KernelContext &ctx;
  LaunchBuilder &l;
  KernelBuilder &kb;
  bool expand;
  Names names;
  int64_t cntMax, tile;
  Value c0, cnt, xs, red;

  /// Global index of x's element (token m, stream i, channel c).
  Value xIndex(Value m, int64_t i, Value c) {
    int64_t n = ctx.n(), C = ctx.C();
    Value base = kb.mul(m, kb.idx(n * C));
    if (ctx.spec.layout == ::mhc::Layout::NC)
      return kb.add(base, kb.add(kb.idx(i * C), c));
    return kb.add(base, kb.add(kb.mul(c, kb.idx(n)), kb.idx(i)));
  }
  /// The projection's column k of local index (stream i, local channel cl).
  Value kIndex(Value i, Value cl) {
    int64_t n = ctx.n(), C = ctx.C();
    Value c = kb.add(c0, cl);
    if (ctx.spec.layout == ::mhc::Layout::NC)
      return kb.add(kb.mul(i, kb.idx(C)), c);
    return kb.add(kb.mul(c, kb.idx(n)), i);
  }

  void stage(Value m0) {
    int64_t n = ctx.n();
    Value M = l.tokens();
    Value items = kb.mul(kb.idx(tile), cnt);
    kb.loop(kb.threadId(), items, kb.idx(kThreads), [&](Value item) {
      Value tm = kb.div(item, cnt), cl = kb.rem(item, cnt);
      Value m = kb.add(m0, tm), c = kb.add(c0, cl);
      Value inside = kb.lt(m, M);
      Value mc = kb.min(m, kb.sub(M, kb.idx(1))); // clamped: loads stay in M
      SmallVector<Value> xn = values(mc, c);
      Value row = kb.mul(tm, kb.idx(n * cntMax));
      for (int64_t i = 0; i < n; ++i) {
        Value v = kb.select(inside, xn[i], kb.f32(0.0));
        kb.store(v, xs, kb.add(row, kb.add(kb.idx(i * cntMax), cl)));
      }
      if (expand)
        kb.when(inside, [&] {
          for (int64_t i = 0; i < n; ++i)
            kb.storeFrom({xn[i]}, l.arg("x_next"), xIndex(m, i, c));
        });
    });
    kb.barrier();
  }

  /// x_next's n values at (token m, channel c), as f32 after the rounding
  /// to the activation type that storing them does.
  SmallVector<Value> values(Value m, Value c) {
    int64_t n = ctx.n();
    SmallVector<Value> xl;
    for (int64_t i = 0; i < n; ++i)
      xl.push_back(kb.toF32(kb.load(l.arg(names.x), xIndex(m, i, c))));
    if (!expand)
      return xl;
    SmallVector<Value> post, P;
    for (int64_t j = 0; j < n; ++j)
      post.push_back(kb.load(l.arg("post"), kb.add(kb.mul(m, kb.idx(n)), kb.idx(j))));
    for (int64_t k = 0; k < n * n; ++k)
      P.push_back(kb.load(l.arg("P"), kb.add(kb.mul(m, kb.idx(n * n)), kb.idx(k))));
    Value fb = kb.toF32(kb.load(l.arg("f"), kb.add(kb.mul(m, kb.idx(ctx.C())), c)));
    if (ctx.spec.hasBias)
      fb = kb.add(fb, kb.toF32(kb.load(l.arg("bias"), c)));
    Type act = elementType(kb.b.getContext(), ctx.spec.act);
    SmallVector<Value> out;
    for (int64_t j = 0; j < n; ++j) {
      Value v = combineStream(kb, n, j, post, P, fb,
                              [&](int64_t i) { return xl[i]; });
      out.push_back(kb.toF32(kb.toType(v, act)));
    }
    return out;
  }

  /// The tile's partials: thread (g, j) sums column j (N: the squares) over
  /// local columns g, g + groups, ... for every token of the tile; the
  /// groups' sums are added in group order.
  void partials(Value m0, Value bid) {
    int64_t n = ctx.n(), N = ctx.N(), K = ctx.K(), width = N + 1;
    int64_t groups = kThreads / width;
    Value tid = kb.threadId(), M = l.tokens();
    Value j = kb.rem(tid, kb.idx(width)), g = kb.div(tid, kb.idx(width));
    Value local = kb.mul(kb.idx(n), cnt);
    kb.when(kb.lt(g, kb.idx(groups)), [&] {
      SmallVector<Value> init(tile, kb.f32(0.0));
      Value isSq = kb.eq(j, kb.idx(N));
      Value jc = kb.min(j, kb.idx(N - 1));
      SmallVector<Value> acc = kb.loop(
          g, local, kb.idx(groups), init,
          [&](Value kl, ValueRange it) -> SmallVector<Value> {
            Value i = kb.div(kl, cnt), cl = kb.rem(kl, cnt);
            Value k = kIndex(i, cl);
            Value p = kb.toF32(kb.load(l.arg("phi"), kb.add(kb.mul(jc, kb.idx(K)), k)));
            Value wk = ctx.spec.hasWeight ? kb.toF32(kb.load(l.arg("weight"), k))
                                          : Value();
            Value at = kb.add(kb.mul(i, kb.idx(cntMax)), cl);
            SmallVector<Value> next;
            for (int64_t tm = 0; tm < tile; ++tm) {
              Value x = kb.load(xs, kb.add(kb.idx(tm * n * cntMax), at));
              Value xw = wk ? kb.mul(x, wk) : x;
              Value a = kb.select(isSq, x, p), c = kb.select(isSq, x, xw);
              next.push_back(kb.fma(a, c, it[tm]));
            }
            return next;
          });
      for (int64_t tm = 0; tm < tile; ++tm)
        kb.store(acc[tm], red,
                 kb.add(kb.mul(kb.add(kb.mul(g, kb.idx(tile)), kb.idx(tm)),
                               kb.idx(width)), j));
    });
    kb.barrier();
    // Item (tm, j) adds the groups in order and stores the partial.
    kb.loop(tid, kb.idx(tile * width), kb.idx(kThreads), [&](Value item) {
      Value tm = kb.div(item, kb.idx(width)), col = kb.rem(item, kb.idx(width));
      Value m = kb.add(m0, tm);
      kb.when(kb.lt(m, M), [&] {
        auto at = [&](int64_t gg) {
          return kb.add(kb.mul(kb.add(kb.idx(gg * tile), tm), kb.idx(width)), col);
        };
        Value sum = kb.load(red, at(0));
        for (int64_t gg = 1; gg < groups; ++gg)
          sum = kb.add(sum, kb.load(red, at(gg)));
        Value to = kb.add(kb.mul(kb.add(kb.mul(bid, M), m), kb.idx(width)), col);
        kb.store(sum, l.arg("partials"), to);
      });
    });
    kb.barrier();
  }
};

/// Phase 2 for token m: the partials summed over the G slices in order
/// (thread per column, as the pre tail sums its splits), then scale and
/// Sinkhorn with the pre tail's helpers.
void finishToken(KernelContext &ctx, LaunchBuilder &l, KernelBuilder &kb,
                 const Names &names, Value m, int64_t G, Value row, Value mix) {
  const ::mhc::KernelSpec &spec = ctx.spec;
  int64_t n = ctx.n(), N = ctx.N(), K = ctx.K(), width = N + 1;
  Value tid = kb.threadId(), M = l.tokens();
  kb.when(kb.lt(tid, kb.idx(width)), [&] {
    Value item = kb.add(kb.mul(m, kb.idx(width)), tid);
    Value stride = kb.mul(M, kb.idx(width));
    SmallVector<Value> sum = kb.loop(
        kb.idx(0), kb.idx(G), kb.idx(1), ValueRange{kb.f32(0.0)},
        [&](Value b, ValueRange it) -> SmallVector<Value> {
          Value v = kb.load(l.arg("partials"), kb.add(kb.mul(b, stride), item));
          return {kb.add(it[0], v)};
        });
    kb.when(kb.eq(tid, kb.idx(N)), [&] {
      Value ms = kb.div(sum[0], kb.f32(static_cast<double>(K)));
      kb.store(ms, l.arg("ms"), m);
      kb.store(ms, row, tid);
    });
    kb.when(kb.lt(tid, kb.idx(N)), [&] {
      kb.store(sum[0], l.arg("h"), kb.add(kb.mul(m, kb.idx(N)), tid));
      kb.store(sum[0], row, tid);
    });
  });
  kb.barrier();
  kb.when(kb.lt(tid, kb.idx(N)), [&] {
    Value r = scaleRsqrt(kb, spec, kb.load(row, kb.idx(N)));
    Value a = kb.toF32(kb.load(l.arg("alpha"), scaleSegment(kb, n, tid)));
    Value beta = kb.toF32(kb.load(l.arg("beta"), tid));
    Value z = scaleLogit(kb, a, kb.load(row, tid), r, beta);
    Value mn = kb.mul(m, kb.idx(n));
    kb.when(kb.lt(tid, kb.idx(n)), [&] {
      kb.store(scaleSquash(kb, spec, z, /*pre=*/true), l.arg("pre"), kb.add(mn, tid));
    });
    kb.when(kb.andi(kb.lt(kb.idx(n - 1), tid), kb.lt(tid, kb.idx(2 * n))), [&] {
      kb.store(scaleSquash(kb, spec, z, /*pre=*/false), l.arg(names.post),
               kb.add(mn, kb.sub(tid, kb.idx(n))));
    });
    kb.when(kb.lt(kb.idx(2 * n - 1), tid), [&] {
      kb.store(z, l.arg("logits"),
               kb.add(kb.mul(m, kb.idx(n * n)), kb.sub(tid, kb.idx(2 * n))));
      kb.store(z, mix, tid);
    });
  });
  kb.barrier();
  kb.when(kb.eq(tid, kb.idx(0)), [&] {
    SmallVector<Value> L;
    for (int64_t k = 0; k < n * n; ++k)
      L.push_back(kb.load(mix, kb.idx(2 * n + k)));
    emitSinkhornPlan(kb, spec, L, [&](ArrayRef<Value> P) {
      for (int64_t k = 0; k < n * n; ++k)
        kb.store(P[k], l.arg(names.P), kb.add(kb.mul(m, kb.idx(n * n)), kb.idx(k)));
    });
  });
  kb.barrier(); // row and mix are reused by the block's next token
}

LogicalResult buildOneLaunch(KernelContext &ctx, bool expand, const Names &names) {
  int64_t n = ctx.n(), N = ctx.N(), C = ctx.C(), width = N + 1;
  int64_t G = ::mhc::oneLaunchBlocks(ctx.spec), cntMax = (C + G - 1) / G;
  int64_t tile = tileTokens(ctx);
  ctx.buffer("partials", DType::F32, BufferRole::Workspace, {G * width, 0});
  LaunchBuilder &l = ctx.launch("one");
  if (expand) {
    l.param("f").param("post").param("x").param("P");
    if (ctx.spec.hasBias)
      l.param("bias");
    l.param("x_next");
  } else {
    l.param("x");
  }
  l.param("phi");
  if (ctx.spec.hasWeight)
    l.param("weight");
  l.param("alpha").param("beta").param("h").param("ms").param("pre")
      .param(names.post).param("logits").param(names.P).param("y")
      .param("partials").param("M").param(::mhc::kSyncParam)
      .block(kThreads).grid({0, G}).cooperative().minBlocksPerSM(1)
      .sharedF32(tile * n * cntMax, 16)
      .sharedF32((kThreads / width) * tile * width, 16)
      .sharedF32(width, 16)
      .sharedF32(N, 16);
  KernelBuilder kb = ctx.begin(l);
  Value M = l.tokens(), bid = kb.blockId();
  Value c0 = kb.div(kb.mul(bid, kb.idx(C)), kb.idx(G));
  Value c1 = kb.div(kb.mul(kb.add(bid, kb.idx(1)), kb.idx(C)), kb.idx(G));
  Value cnt = kb.sub(c1, c0);
  Phase1 p1{ctx, l, kb, expand, names, cntMax, tile, c0, cnt, l.shared(0), l.shared(1)};
  Value tiles = kb.div(kb.add(M, kb.idx(tile - 1)), kb.idx(tile));
  kb.loop(kb.idx(0), tiles, kb.idx(1), [&](Value t) {
    Value m0 = kb.mul(t, kb.idx(tile));
    p1.stage(m0);
    p1.partials(m0, bid);
  });
  Value sync = l.arg(::mhc::kSyncParam);
  kb.gridBarrier(sync, G);
  kb.loop(bid, M, kb.idx(G), [&](Value m) {
    finishToken(ctx, l, kb, names, m, G, l.shared(2), l.shared(3));
  });
  kb.gridBarrier(sync, G);
  // y on the block's slice, for every token, with the aggregate's fma chain.
  const char *xn = expand ? "x_next" : "x";
  Value items = kb.mul(M, cnt);
  kb.loop(kb.threadId(), items, kb.idx(kThreads), [&](Value item) {
    Value m = kb.div(item, cnt), c = kb.add(c0, kb.rem(item, cnt));
    Value acc;
    for (int64_t i = 0; i < n; ++i) {
      Value pre = kb.load(l.arg("pre"), kb.add(kb.mul(m, kb.idx(n)), kb.idx(i)));
      Value x = kb.toF32(kb.load(l.arg(xn), p1.xIndex(m, i, c)));
      acc = i == 0 ? kb.mul(pre, x) : kb.fma(pre, x, acc);
    }
    kb.storeFrom({acc}, l.arg("y"), kb.add(kb.mul(m, kb.idx(C)), c));
  });
  return success();
}

} // namespace

LogicalResult mlir::mhc::buildPreOneLaunch(KernelContext &ctx) {
  const ::mhc::KernelSpec &spec = ctx.spec;
  int64_t n = ctx.n(), N = ctx.N(), C = ctx.C();
  declareProjectForwardIO(ctx);
  ctx.buffer("alpha", spec.param, BufferRole::Input, {0, 3});
  ctx.buffer("beta", spec.param, BufferRole::Input, {0, N});
  ctx.buffer("pre", DType::F32, BufferRole::Output, {n, 0});
  ctx.buffer("post", DType::F32, BufferRole::Output, {n, 0});
  ctx.buffer("logits", DType::F32, BufferRole::Output, {n * n, 0});
  ctx.buffer("P", DType::F32, BufferRole::Output, {n * n, 0});
  ctx.buffer("y", spec.act, BufferRole::Output, {C, 0});
  return buildOneLaunch(ctx, /*expand=*/false, {"x", "post", "P"});
}

LogicalResult mlir::mhc::buildPostPreOneLaunch(KernelContext &ctx) {
  Composition c(ctx); // declares the contract's buffers, in order
  seam::declareForwardContract(c, ctx);
  return buildOneLaunch(ctx, /*expand=*/true, {"x", "post_next", "P_next"});
}
