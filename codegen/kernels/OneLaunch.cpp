//===- OneLaunch.cpp - pre.fwd / post_pre.fwd in one cooperative launch ---===//
//
// The decode-size forward (docs/design/serve.md): a fixed grid of G
// co-resident blocks, each owning a channel slice of C, runs
//   1. for every tile of tokens: x_next on its slice (the seam:
//      expand_combine's combineStream from layer l's x, f, post, P; the pre
//      step: x itself), stored, and its split-K partials of h and the sum of
//      squares over the slice (a fixed-order block sum) into partials
//      [M, N + 1, G];
//   grid barrier;
//   2. M <= tile (decode): every block sums pre's columns of every token
//      itself (the owners' order: the same bits), scales and runs Sinkhorn
//      for its own tokens (warp 0) while warps 1-7 write y from shared
//      memory: no second barrier;
//   3. M > tile: tokens b, b + G, ...: the partials summed, scale and
//      Sinkhorn (the pre tail's helpers); grid barrier; y = pre . x_next on
//      its slice for every token (the x_next it stored itself).
// Integer atomics only (SimtBuilder::gridBarrier); no float atomics.
//
//===----------------------------------------------------------------------===//

#include "builder/Streams.h"
#include "kernels/Kernels.h"
#include "kernels/project/Project.h"
#include "kernels/seam/Contract.h"

#include <numeric>

using namespace mlir;
using namespace mlir::mhc;
using ::mhc::BufferRole;
using ::mhc::DType;

namespace {

constexpr int kThreads = 256;
/// Tokens whose x_next slices phase 1 keeps in shared memory at once (the
/// most; fewer where shared memory is short).
constexpr int64_t kTileTokens = 16;
/// Tokens of the partials' short FMA pass (a tile with at most this many
/// live tokens); fuller tiles take one pass over all their tokens.
constexpr int64_t kPassTokens = 4;
/// Items (token, channel) whose loads a thread of phase 1's stage issues
/// before computing any.
constexpr int64_t kStageItems = 4;
/// The most thread rows that share a column in phase 3, and the blocks'
/// partials each of its threads loads at once (issued before their adds).
constexpr int64_t kFinishRows = 16;
constexpr int64_t kFinishLoads = 16;

/// Names of the buffers the kernel reads and writes (the seam's contract
/// renames pre's post and P).
struct Names {
  const char *x, *post, *P;
};

/// Phase 1's shapes. The block's local columns kl in [0, L = n * cntMax)
/// (NC: i * cntMax + cl; CN: cl * n + i, contiguous in K) are padded to Lp,
/// a multiple of the thread groups: group g sums kl = g, g + groups, ...
/// in T steps. xs holds x_next as [Lp][tile] (token-minor, zeros past the
/// slice), phiS the slice of phi as [N][Ls] (Ls = Lp rounded odd: rows in
/// distinct banks) when it fits, else phi is read from global.
/// The stage's threads take a quad of tokens (quad = min(tile, 4)) on one
/// channel; xs's row of column kl holds the tile's Q = tile / quad quads
/// rotated by kl's local channel (xsAt).
struct Plan {
  int64_t G, cntMax, L, width, groups, T, Lp, Ls, tile, pass, finishRows, quad, Q;
  bool stagePhi;
  /// Programmatic dependent launch (sm_90+): the grid may start while the
  /// stream's previous kernel finishes, and waits for it before its first
  /// global access (griddepcontrol.wait).
  bool dependent;
};

Plan planOneLaunch(const KernelContext &ctx) {
  Plan p;
  int64_t n = ctx.n(), N = ctx.N();
  p.G = ::mhc::oneLaunchBlocks(ctx.spec);
  p.dependent = ctx.spec.arch != "sm_80";
  p.cntMax = (ctx.C() + p.G - 1) / p.G;
  p.L = n * p.cntMax;
  p.width = N + 1;
  p.groups = kThreads / p.width;
  p.T = (p.L + p.groups - 1) / p.groups;
  p.Lp = p.T * p.groups;
  p.Ls = p.Lp | 1;
  p.finishRows = std::min<int64_t>(p.groups, kFinishRows);
  int64_t limit = LaunchBuilder::sharedLimit(ctx.spec.arch) - 256; // alignment
  auto bytes = [&](int64_t tile, bool stage) {
    int64_t phi = stage ? N * p.Ls + (ctx.spec.hasWeight ? p.Lp : 0) : 0;
    int64_t own = (tile + p.G - 1) / p.G; // a block's tokens in the decode path
    int64_t decode = tile * (n + 1) * p.finishRows + own * (N - n) * p.finishRows +
                     tile * n + 2 * n; // fin2, finOwn, preS, abS
    return 4 * (tile * p.Lp + phi + p.groups * tile * p.width +
                p.finishRows * p.width + p.width + N + tile * (n + n * n) + decode);
  };
  auto finish = [&](int64_t tile, bool stage) {
    p.tile = tile, p.stagePhi = stage;
    p.pass = std::min(tile, kPassTokens);
    p.quad = std::min<int64_t>(tile, 4);
    p.Q = tile / p.quad;
    return p;
  };
  for (bool stage : {true, false})
    for (int64_t tile = kTileTokens; tile >= (stage ? kPassTokens : 1); tile /= 2)
      if (bytes(tile, stage) <= limit)
        return finish(tile, stage);
  return finish(1, false); // (the slice rule keeps this in reach)
}

/// Phase 1 for one tile of tokens: x_next of the block's channels [c0, c0 +
/// cnt) into shared `xs`, then the block's partials of those tokens.
struct Phase1 {
  KernelContext &ctx;
  LaunchBuilder &l;
  KernelBuilder &kb;
  bool expand;
  Names names;
  const Plan &p;
  Value c0, cnt, xs, phiS, wS, red, mixS;

  /// Global index of x's element (token m, stream i, channel c).
  Value xIndex(Value m, int64_t i, Value c) {
    int64_t n = ctx.n(), C = ctx.C();
    Value base = kb.mul(m, kb.idx(n * C));
    if (ctx.spec.layout == ::mhc::Layout::NC)
      return kb.add(base, kb.add(kb.idx(i * C), c));
    return kb.add(base, kb.add(kb.mul(c, kb.idx(n)), kb.idx(i)));
  }
  /// The local column of (stream i, local channel cl).
  Value localCol(int64_t i, Value cl) {
    if (ctx.spec.layout == ::mhc::Layout::NC)
      return kb.add(kb.idx(i * p.cntMax), cl);
    return kb.add(kb.mul(cl, kb.idx(ctx.n())), kb.idx(i));
  }
  /// Local column kl's projection column k (clamped to 0 outside the
  /// slice) and whether it is inside (kl < L, its channel < cnt).
  std::pair<Value, Value> globalCol(Value kl) {
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
  Value phiGlobal(Value j, Value kl) {
    auto [k, inside] = globalCol(kl);
    Value v = kb.toF32(kb.load(l.arg("phi"), kb.add(kb.mul(j, kb.idx(ctx.K())), k)));
    return kb.select(inside, v, kb.f32(0.0));
  }

  /// Once per launch, first: xs zeroed (the padding columns stay zero).
  void zeroXs() {
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
  void stagePhiSlice() {
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
  Value localChannel(Value kl) {
    if (ctx.spec.layout == ::mhc::Layout::NC)
      return kb.rem(kl, kb.idx(p.cntMax));
    return kb.div(kl, kb.idx(ctx.n()));
  }
  /// xs's element of local column kl (local channel cl), tile token tm:
  /// row kl holds the tile's quads of tokens rotated by cl mod Q, so that a
  /// warp of the stage (quads on 8 channels, one stream) stores into 16
  /// banks or more; a quad stays 16 contiguous bytes for the pass.
  Value xsAt(Value kl, Value cl, Value tm) {
    Value q = kb.div(tm, kb.idx(p.quad)), tq = kb.rem(tm, kb.idx(p.quad));
    Value slot = p.Q == 1 ? kb.idx(0) : kb.rem(kb.add(q, cl), kb.idx(p.Q));
    return kb.add(kb.mul(kl, kb.idx(p.tile)), kb.add(kb.mul(slot, kb.idx(p.quad)), tq));
  }
  /// Token m's n values at channel c of a stream buffer (x, x_next), as
  /// f32: CN in the widest aligned pieces of the n contiguous values.
  SmallVector<Value> loadToken(Value mem, Value m, Value c) {
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
  void storeToken(ArrayRef<Value> v, Value mem, Value m, Value c) {
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
  std::pair<Value, Value> stageItem(Value item) {
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
  void stage(Value m0, Value live) {
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
  void stageMix(Value m0, Value live) {
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
  SmallVector<Value> combined(Value tm, ArrayRef<Value> xl, Value fb) {
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

  /// Tile tokens 0 .. tokens of local column kl from xs, a quad per
  /// 16-byte load.
  SmallVector<Value> xsTokens(Value kl, int64_t tokens) {
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
  void pass(Value g, Value j, int64_t tokens, bool squares) {
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
  void partials(Value m0, Value live, Value bid) {
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
};

/// Blocks of the partials each row of the finish sums (finishRows rows).
int64_t finishRowBlocks(const Plan &p) {
  return (p.G + p.finishRows - 1) / p.finishRows;
}
/// The partials' element of block b, item (m * width + col): [M][width][G],
/// so that a row's blocks (and the rows of one item) are consecutive words:
/// every block's redundant sums of the decode path (decodeSums) read whole
/// sectors.
Value partialAt(KernelBuilder &kb, const Plan &p, Value item, Value b) {
  return kb.add(kb.mul(item, kb.idx(p.G)), b);
}
/// The loads of blocks r * B + u, u in [u0, u1), of row r's share of the G
/// partials of `item`, 0 past G.
SmallVector<Value> rowLoads(LaunchBuilder &l, KernelBuilder &kb, const Plan &p,
                            Value item, Value r, int64_t u0, int64_t u1) {
  int64_t B = finishRowBlocks(p);
  SmallVector<Value> v;
  for (int64_t u = u0; u < u1; ++u) {
    Value b = kb.add(kb.mul(r, kb.idx(B)), kb.idx(u));
    Value inside = kb.lt(b, kb.idx(p.G));
    Value bc = kb.min(b, kb.idx(p.G - 1));
    Value x = kb.load(l.arg("partials"), partialAt(kb, p, item, bc));
    v.push_back(kb.select(inside, x, kb.f32(0.0)));
  }
  return v;
}
/// `sum` (null: none yet) plus the loads in order.
Value addInOrder(KernelBuilder &kb, Value sum, ArrayRef<Value> loads) {
  for (Value x : loads)
    sum = sum ? kb.add(sum, x) : x;
  return sum;
}
/// Row r's sum of `item` over its B blocks in block order, kFinishLoads
/// loads in flight. Every sum of the partials over the G slices is these
/// rows, then the rows in order (sumPartials, decodeTotal): one order.
Value rowSum(LaunchBuilder &l, KernelBuilder &kb, const Plan &p, Value item,
             Value r) {
  int64_t B = finishRowBlocks(p);
  Value sum;
  for (int64_t u0 = 0; u0 < B; u0 += kFinishLoads)
    sum = addInOrder(kb, sum, rowLoads(l, kb, p, item, r, u0,
                                       std::min(B, u0 + kFinishLoads)));
  return sum;
}

/// Phase 3's sum of token m's partials over the G slices: thread (r, col)
/// sums its row (rowLoads), the rows' sums are then added in row order: h
/// and ms into `row`.
void sumPartials(KernelContext &ctx, LaunchBuilder &l, KernelBuilder &kb,
                 const Plan &p, Value m, Value fin, Value row) {
  int64_t N = ctx.N(), K = ctx.K(), width = p.width, R = p.finishRows;
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
    kb.when(kb.eq(tid, kb.idx(N)), [&] {
      Value ms = kb.div(sum, kb.f32(static_cast<double>(K)));
      kb.store(ms, l.arg("ms"), m);
      kb.store(ms, row, tid);
    });
    kb.when(kb.lt(tid, kb.idx(N)), [&] {
      kb.store(sum, l.arg("h"), kb.add(kb.mul(m, kb.idx(N)), tid));
      kb.store(sum, row, tid);
    });
  });
  kb.barrier();
}

/// Token m's partials summed (sumPartials), then scale with the thread's
/// alpha and beta (`ab`), emitTokenScale: h, ms, pre, post and logits
/// stored, the logits also into logitsS[at ..]. Ends with a barrier.
void finishScale(KernelContext &ctx, LaunchBuilder &l, KernelBuilder &kb,
                 const Names &names, const Plan &p, Value m, Value fin, Value row,
                 Value logitsS, Value at, std::pair<Value, Value> ab) {
  sumPartials(ctx, l, kb, p, m, fin, row);
  emitTokenScale(
      kb, ctx.spec, l, m, row, names.post, [&] { return ab; }, [](Value, Value) {},
      [&](Value k, Value z) { kb.store(z, logitsS, kb.add(at, k)); });
  kb.barrier();
}

/// Token m's Sinkhorn in this thread, from its logits in logitsS[at ..].
void sinkhornToken(KernelContext &ctx, LaunchBuilder &l, KernelBuilder &kb,
                   const Names &names, Value m, Value logitsS, Value at) {
  emitTokenSinkhorn(kb, ctx.spec, l, m, logitsS, at, names.P);
}

/// Phase 3 (M > tile) for token m: finishScale, then thread 0's Sinkhorn.
void finishToken(KernelContext &ctx, LaunchBuilder &l, KernelBuilder &kb,
                 const Names &names, const Plan &p, Value m, Value fin, Value row,
                 Value mix, std::pair<Value, Value> ab) {
  finishScale(ctx, l, kb, names, p, m, fin, row, mix, kb.idx(0), ab);
  kb.when(kb.eq(kb.threadId(), kb.idx(0)),
          [&] { sinkhornToken(ctx, l, kb, names, m, mix, kb.idx(0)); });
  kb.barrier(); // row and mix are reused by the block's next token
}

/// The sum of a column's R row sums in row order (sumPartials' order) from
/// a [tokens][cols][R] buffer of the decode path: token t, column cc.
Value decodeTotal(KernelBuilder &kb, const Plan &p, Value buf, Value t, int64_t cols,
                  Value cc) {
  Value at = kb.mul(kb.add(kb.mul(t, kb.idx(cols)), cc), kb.idx(p.finishRows));
  Value sum = kb.load(buf, at);
  for (int64_t rr = 1; rr < p.finishRows; ++rr)
    sum = kb.add(sum, kb.load(buf, kb.add(at, kb.idx(rr))));
  return sum;
}

/// A block's tokens in the decode path (M <= tile): bid + k G, k < this.
int64_t ownTokens(const Plan &p) { return (p.tile + p.G - 1) / p.G; }

/// The decode path's sums (M <= tile), one round of loads: every block sums
/// pre's columns (h_i, i < n, and the squares) of every token into fin2
/// [M][n + 1][R], and the other columns (post's, the logits') of its own
/// tokens (bid + k G) into finOwn [own][N - n][R], each column as its R
/// rows (rowSum, sumPartials' rows: every block and the owner get the same
/// bits); then squashes pre into preS [M][n]. Two tasks' loads in flight per
/// thread where a row has <= kFinishLoads blocks. abS: (alpha, beta) of
/// pre's i.
void decodeSums(KernelContext &ctx, LaunchBuilder &l, KernelBuilder &kb,
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

/// The decode path's finish of the block's k-th token m (after decodeSums):
/// h and ms from fin2 and finOwn (the rows added in order: sumPartials'
/// bits) stored and into `row`, then scale (emitTokenScale) with the
/// thread's alpha and beta: pre, post and logits stored, the logits also
/// into logitsS[at ..]. Ends with a barrier.
void decodeFinish(KernelContext &ctx, LaunchBuilder &l, KernelBuilder &kb,
                  const Names &names, const Plan &p, Value m, Value k, Value fin2,
                  Value finOwn, Value row, Value logitsS, Value at,
                  std::pair<Value, Value> ab) {
  int64_t n = ctx.n(), N = ctx.N(), K = ctx.K(), cols = n + 1;
  Value tid = kb.threadId();
  kb.when(kb.lt(tid, kb.idx(p.width)), [&] {
    Value isPre = kb.lt(tid, kb.idx(n)), isMs = kb.eq(tid, kb.idx(N));
    Value cc = kb.select(isMs, kb.idx(n), kb.min(tid, kb.idx(n)));
    Value jj = kb.sub(kb.min(kb.max(tid, kb.idx(n)), kb.idx(N - 1)), kb.idx(n));
    Value fromFin2 = decodeTotal(kb, p, fin2, m, cols, cc);
    Value fromOwn = decodeTotal(kb, p, finOwn, k, N - n, jj);
    Value sum = kb.select(isPre, fromFin2, kb.select(isMs, fromFin2, fromOwn));
    kb.when(isMs, [&] {
      Value ms = kb.div(sum, kb.f32(static_cast<double>(K)));
      kb.store(ms, l.arg("ms"), m);
      kb.store(ms, row, tid);
    });
    kb.when(kb.lt(tid, kb.idx(N)), [&] {
      kb.store(sum, l.arg("h"), kb.add(kb.mul(m, kb.idx(N)), tid));
      kb.store(sum, row, tid);
    });
  });
  kb.barrier();
  emitTokenScale(
      kb, ctx.spec, l, m, row, names.post, [&] { return ab; }, [](Value, Value) {},
      [&](Value c, Value z) { kb.store(z, logitsS, kb.add(at, c)); });
  kb.barrier();
}

/// The decode path's y (M <= tile) on threads firstThread.. (warp 0 runs
/// the Sinkhorn meanwhile): pre from preS and x_next from xs (the block's
/// own, as phase 1 stored it), with the aggregate's fma chain; the stage's
/// item order (xs's banks).
void writeYShared(KernelContext &ctx, LaunchBuilder &l, KernelBuilder &kb,
                  Phase1 &p1, Value preS, int64_t firstThread) {
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

/// Phase 5 (M > tile): y on the block's slice, for every token, with the
/// aggregate's fma chain; item = m * cntMax + cl (constant divisors), each
/// thread issuing the loads of kStageItems items (pre and x) before
/// computing any.
void writeY(KernelContext &ctx, LaunchBuilder &l, KernelBuilder &kb, Phase1 &p1,
            const char *xn) {
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

/// The launch's parameters and shared buffers (their indices: Shared).
enum Shared { kXs, kPhiS, kWS, kRed, kFin, kRow, kMix, kMixS, kFin2, kFinOwn, kPreS, kAbS };
LaunchBuilder &declareLaunch(KernelContext &ctx, bool expand, const Names &names,
                             const Plan &p) {
  int64_t n = ctx.n(), N = ctx.N(), width = p.width;
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
  bool stageW = p.stagePhi && ctx.spec.hasWeight;
  l.param("alpha").param("beta").param("h").param("ms").param("pre")
      .param(names.post).param("logits").param(names.P).param("y")
      .param("partials").param("M").param(::mhc::kSyncParam)
      .block(kThreads).grid({0, p.G}).cooperative().minBlocksPerSM(1);
  if (p.dependent)
    l.programmaticDependent();
  l
      .sharedF32(p.tile * p.Lp, 16)                       // xs
      .sharedF32(p.stagePhi ? N * p.Ls : 1, 16)            // phiS
      .sharedF32(stageW ? p.Lp : 1, 16)                    // wS
      .sharedF32(p.groups * p.tile * width, 16)            // red
      .sharedF32(p.finishRows * width, 16)                 // fin
      .sharedF32(width, 16)                                // row
      .sharedF32(N, 16)                                    // mix
      .sharedF32(expand ? p.tile * (n + n * n) : 1, 16)    // mixS
      .sharedF32(p.tile * (n + 1) * p.finishRows, 16)      // fin2
      .sharedF32(ownTokens(p) * (N - n) * p.finishRows, 16) // finOwn
      .sharedF32(p.tile * n, 16)                           // preS
      .sharedF32(2 * n, 16);                               // abS
  return l;
}

LogicalResult buildOneLaunch(KernelContext &ctx, bool expand, const Names &names) {
  int64_t n = ctx.n(), N = ctx.N(), C = ctx.C();
  Plan p = planOneLaunch(ctx);
  int64_t G = p.G;
  ctx.buffer("partials", DType::F32, BufferRole::Workspace, {G * p.width, 0});
  LaunchBuilder &l = declareLaunch(ctx, expand, names, p);
  KernelBuilder kb = ctx.begin(l);
  Value M = l.tokens(), bid = kb.blockId(), tid = kb.threadId();
  Value c0 = kb.div(kb.mul(bid, kb.idx(C)), kb.idx(G));
  Value c1 = kb.div(kb.mul(kb.add(bid, kb.idx(1)), kb.idx(C)), kb.idx(G));
  Value cnt = kb.sub(c1, c0);
  Phase1 p1{ctx, l, kb, expand, names, p, c0, cnt,
            l.shared(kXs), l.shared(kPhiS), l.shared(kWS), l.shared(kRed), l.shared(kMixS)};
  p1.zeroXs();
  if (p.dependent) {
    // Everything above is this block's own (shared memory, indices): it
    // overlaps the previous kernel's tail. Every global access is below.
    kb.waitGridDependency();
    kb.launchDependents();
  }
  Value tiles = kb.div(kb.add(M, kb.idx(p.tile - 1)), kb.idx(p.tile));
  kb.loop(kb.idx(0), tiles, kb.idx(1), [&](Value t) {
    Value m0 = kb.mul(t, kb.idx(p.tile));
    Value live = kb.min(kb.sub(M, m0), kb.idx(p.tile));
    p1.stage(m0, live);
    p1.partials(m0, live, bid);
  });
  // Thread k's alpha and beta (k < N; clamped), loaded before the barrier;
  // pre's (k < n) into abS for the decode path.
  Value kq = kb.min(tid, kb.idx(N - 1));
  std::pair<Value, Value> ab{kb.toF32(kb.load(l.arg("alpha"), scaleSegment(kb, n, kq))),
                             kb.toF32(kb.load(l.arg("beta"), kq))};
  Value abS = l.shared(kAbS);
  kb.when(kb.lt(tid, kb.idx(n)), [&] {
    kb.store(ab.first, abS, kb.mul(tid, kb.idx(2)));
    kb.store(ab.second, abS, kb.add(kb.mul(tid, kb.idx(2)), kb.idx(1)));
  });
  Value sync = l.arg(::mhc::kSyncParam);
  kb.gridBarrier(sync, G);
  // Decode (M <= tile): no second barrier. Every block finds pre itself;
  // the block's own tokens (m = bid + k G) scaled, their logits into red
  // (done with) at k n n; then warp 0 runs their Sinkhorns (lane k: token
  // bid + k G) while the other warps write y.
  Value decode = kb.lt(M, kb.idx(p.tile + 1));
  kb.when(decode, [&] {
    decodeSums(ctx, l, kb, p, l.shared(kFin2), l.shared(kFinOwn), l.shared(kPreS), abS);
    Value logitsS = l.shared(kRed);
    kb.loop(bid, M, kb.idx(G), [&](Value m) {
      Value k = kb.div(m, kb.idx(G));
      decodeFinish(ctx, l, kb, names, p, m, k, l.shared(kFin2), l.shared(kFinOwn),
                   l.shared(kRow), logitsS, kb.mul(k, kb.idx(n * n)), ab);
    });
    Value m = kb.add(bid, kb.mul(tid, kb.idx(G)));
    kb.when(kb.andi(kb.lt(tid, kb.idx(32)), kb.lt(m, M)), [&] {
      sinkhornToken(ctx, l, kb, names, m, logitsS, kb.mul(tid, kb.idx(n * n)));
    });
    writeYShared(ctx, l, kb, p1, l.shared(kPreS), /*firstThread=*/32);
  });
  kb.when(kb.lt(kb.idx(p.tile), M), [&] {
    kb.loop(bid, M, kb.idx(G), [&](Value m) {
      finishToken(ctx, l, kb, names, p, m, l.shared(kFin), l.shared(kRow), l.shared(kMix), ab);
    });
    kb.gridBarrier(sync, G);
    writeY(ctx, l, kb, p1, expand ? "x_next" : "x");
  });
  return success();
}

} // namespace

LogicalResult mlir::mhc::buildPreOneLaunch(KernelContext &ctx) {
  declareProjectForwardIO(ctx);
  declarePreTailIO(ctx);
  return buildOneLaunch(ctx, /*expand=*/false, {"x", "post", "P"});
}

LogicalResult mlir::mhc::buildPostPreOneLaunch(KernelContext &ctx) {
  Composition c(ctx); // declares the contract's buffers, in order
  seam::declareForwardContract(c, ctx);
  return buildOneLaunch(ctx, /*expand=*/true, {"x", "post_next", "P_next"});
}
