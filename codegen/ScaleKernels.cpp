//===- ScaleKernels.cpp - RMS scale and squash of the logits, gradient ----===//
//
// Per-token work on N = 2n + n^2 floats: the forward takes a thread per
// (token, 4 logits) (per logit when n % 4 != 0), the backward one per token. The backward's
// cross-token sums (galpha, gbeta) go through a per-token contribution row
// and the deterministic column sum.
//
//===----------------------------------------------------------------------===//

#include "Families.h"

using namespace mlir;
using namespace mlir::mhc;
using ::mhc::BufferRole;
using ::mhc::DType;

namespace {
/// The recomputed forward of one token.
struct TokenScale {
  Value r;                  // 1 / sqrt(ms + norm_eps)
  SmallVector<Value> h, z;  // N each
  SmallVector<Value> alpha; // per logit: alpha of its segment
};

int segmentOf(int64_t k, int64_t n) { return k < n ? 0 : (k < 2 * n ? 1 : 2); }

/// The forward of one token, in f32 or (wide) f64.
TokenScale recompute(KernelBuilder &kb, const KernelContext &ctx,
                     LaunchBuilder &l, Value m, bool wide = false) {
  int64_t n = ctx.n(), N = ctx.N();
  auto widen = [&](Value v) { return wide ? kb.toF64(kb.toF32(v)) : kb.toF32(v); };
  TokenScale t;
  Value ms = widen(kb.load(l.arg("ms"), m));
  Value one = kb.constLike(ms, 1.0);
  t.r = kb.div(one, kb.sqrt(kb.add(ms, kb.constLike(ms, ctx.spec.normEps))));
  SmallVector<Value> alpha;
  for (int64_t s = 0; s < 3; ++s)
    alpha.push_back(widen(kb.load(l.arg("alpha"), kb.idx(s))));
  for (int64_t k = 0; k < N; ++k) {
    Value h = widen(kb.load(l.arg("h"), kb.add(kb.mul(m, kb.idx(N)), kb.idx(k))));
    Value beta = widen(kb.load(l.arg("beta"), kb.idx(k)));
    Value a = alpha[segmentOf(k, n)];
    t.h.push_back(h);
    t.alpha.push_back(a);
    t.z.push_back(kb.fma(kb.mul(a, h), t.r, beta));
  }
  return t;
}

void declareInputs(KernelContext &ctx) {
  DType param = ctx.spec.param;
  ctx.buffer("h", DType::F32, BufferRole::Input, {ctx.N(), 0});
  ctx.buffer("ms", DType::F32, BufferRole::Input, {1, 0});
  ctx.buffer("alpha", param, BufferRole::Input, {0, 3});
  ctx.buffer("beta", param, BufferRole::Input, {0, ctx.N()});
}
} // namespace

static LogicalResult buildForward(KernelContext &ctx) {
  int64_t n = ctx.n();
  declareInputs(ctx);
  ctx.buffer("pre", DType::F32, BufferRole::Output, {n, 0});
  ctx.buffer("post", DType::F32, BufferRole::Output, {n, 0});
  ctx.buffer("logits", DType::F32, BufferRole::Output, {n * n, 0});

  // A thread per (token, W consecutive logits), T tokens per block: h is
  // read and pre/post/logits are written by consecutive threads at
  // consecutive addresses, 16 bytes per access when n % 4 == 0 (then the
  // segments start at multiples of 4 and a group never straddles two).
  // H100, M = 32768, n = 4: a thread per token (N strided scalar loads)
  // took 10.7 us, a thread per logit 5.0 us, per 4 logits 3.3 us (2.6 us
  // with the approximate math below).
  int64_t N = ctx.N(), W = n % 4 == 0 ? 4 : 1, G = N / W;
  int64_t T = std::max<int64_t>(1, 256 / G);
  LaunchBuilder &l = ctx.launch("main");
  l.param("h").param("ms").param("alpha").param("beta").param("pre")
      .param("post").param("logits").param("M").block(static_cast<int>(T * G))
      .grid({T, 0});
  KernelBuilder kb = ctx.begin(l);
  Value tid = kb.threadId();
  Value m = kb.add(kb.mul(kb.blockId(), kb.idx(T)), kb.div(tid, kb.idx(G)));
  Value k = kb.mul(kb.rem(tid, kb.idx(G)), kb.idx(W));
  kb.when(kb.lt(m, l.tokens()), [&] {
    // Single-instruction rsqrt and sigmoid (~2^-22 relative, bound 1e-5):
    // the kernel is latency-bound, and libdevice's accurate sqrt, exp and
    // divisions are most of each thread's work.
    Value ms = kb.toF32(kb.load(l.arg("ms"), m));
    Value r = kb.rsqrtApprox(kb.add(ms, kb.f32(ctx.spec.normEps)));
    Value seg = kb.add(kb.select(kb.lt(k, kb.idx(n)), kb.idx(0), kb.idx(1)),
                       kb.select(kb.lt(k, kb.idx(2 * n)), kb.idx(0), kb.idx(1)));
    Value a = kb.toF32(kb.load(l.arg("alpha"), seg));
    SmallVector<Value> h =
        kb.loadF32(l.arg("h"), kb.add(kb.mul(m, kb.idx(N)), k), W);
    SmallVector<Value> beta = kb.loadF32(l.arg("beta"), k, W);
    SmallVector<Value> z;
    for (int64_t e = 0; e < W; ++e)
      z.push_back(kb.fma(kb.mul(a, h[e]), r, beta[e]));
    auto squashed = [&](double mult, double add) {
      SmallVector<Value> out;
      for (Value v : z)
        out.push_back(kb.add(kb.mul(kb.f32(mult), kb.sigmoidApprox(v)), kb.f32(add)));
      return out;
    };
    kb.when(kb.lt(k, kb.idx(n)), [&] {
      kb.storeFrom(squashed(1.0, ctx.spec.preEps), l.arg("pre"),
                   kb.add(kb.mul(m, kb.idx(n)), k));
    });
    kb.when(kb.andi(kb.lt(kb.idx(n - 1), k), kb.lt(k, kb.idx(2 * n))), [&] {
      kb.storeFrom(squashed(ctx.spec.postMult, 0.0), l.arg("post"),
                   kb.add(kb.mul(m, kb.idx(n)), kb.sub(k, kb.idx(n))));
    });
    kb.when(kb.lt(kb.idx(2 * n - 1), k), [&] {
      kb.storeFrom(z, l.arg("logits"),
                   kb.add(kb.mul(m, kb.idx(n * n)), kb.sub(k, kb.idx(2 * n))));
    });
  });
  return success();
}

static LogicalResult buildBackward(KernelContext &ctx) {
  int64_t n = ctx.n(), N = ctx.N();
  DType param = ctx.spec.param;
  ctx.buffer("gpre", DType::F32, BufferRole::Input, {n, 0});
  ctx.buffer("gpost", DType::F32, BufferRole::Input, {n, 0});
  ctx.buffer("glogits", DType::F32, BufferRole::Input, {n * n, 0});
  declareInputs(ctx);
  ctx.buffer("gh", DType::F32, BufferRole::Output, {N, 0});
  ctx.buffer("gms", DType::F32, BufferRole::Output, {1, 0});
  ctx.buffer("galpha", param, BufferRole::Output, {0, 3});
  ctx.buffer("gbeta", param, BufferRole::Output, {0, N});
  // Per token: galpha's three terms, then gz (gbeta's terms).
  ctx.buffer("contrib", DType::F32, BufferRole::Workspace, {3 + N, 0});

  const int threads = 128;
  LaunchBuilder &l = ctx.launch("main");
  l.param("gpre").param("gpost").param("glogits").param("h").param("ms")
      .param("alpha").param("beta").param("gh").param("gms").param("contrib")
      .param("M").block(threads).grid({threads, 0});
  KernelBuilder kb = ctx.begin(l);
  Value m = kb.add(kb.mul(kb.blockId(), kb.idx(threads)), kb.threadId());
  kb.when(kb.lt(m, l.tokens()), [&] {
    // In f64: gms and galpha are sums with heavy cancellation, so fp32 term
    // errors would be amplified past fp32 accuracy for a single token.
    TokenScale t = recompute(kb, ctx, l, m, /*wide=*/true);
    auto c = [&](double v) { return kb.f64(v); };
    auto load = [&](StringRef name, Value off) {
      return kb.toF64(kb.load(l.arg(name.str()), off));
    };
    auto store = [&](Value v, StringRef name, Value off) {
      kb.store(kb.toType(v, kb.b.getF32Type()), l.arg(name.str()), off);
    };
    Value one = c(1.0);
    SmallVector<Value> gz(N);
    for (int64_t i = 0; i < n; ++i) {
      Value off = kb.add(kb.mul(m, kb.idx(n)), kb.idx(i));
      Value s = kb.sigmoid(t.z[i]);
      gz[i] = kb.mul(load("gpre", off), kb.mul(s, kb.sub(one, s)));
      Value post = kb.mul(c(ctx.spec.postMult), kb.sigmoid(t.z[n + i]));
      Value dpost = kb.mul(post, kb.sub(one, kb.div(post, c(ctx.spec.postMult))));
      gz[n + i] = kb.mul(load("gpost", off), dpost);
    }
    for (int64_t k = 0; k < n * n; ++k)
      gz[2 * n + k] = load("glogits", kb.add(kb.mul(m, kb.idx(n * n)), kb.idx(k)));
    Value row = kb.mul(m, kb.idx(3 + N));
    Value dot = c(0.0); // sum_k gz_k alpha_k h_k
    SmallVector<Value> segment(3, c(0.0));
    for (int64_t k = 0; k < N; ++k) {
      store(kb.mul(kb.mul(gz[k], t.alpha[k]), t.r), "gh",
            kb.add(kb.mul(m, kb.idx(N)), kb.idx(k)));
      Value gzh = kb.mul(gz[k], t.h[k]);
      dot = kb.fma(gzh, t.alpha[k], dot);
      segment[segmentOf(k, n)] = kb.add(segment[segmentOf(k, n)], gzh);
      store(gz[k], "contrib", kb.add(row, kb.idx(3 + k)));
    }
    for (int64_t s = 0; s < 3; ++s)
      store(kb.mul(segment[s], t.r), "contrib", kb.add(row, kb.idx(s)));
    Value r3 = kb.mul(kb.mul(t.r, t.r), t.r);
    store(kb.mul(kb.mul(c(-0.5), r3), dot), "gms", m);
  });
  emitColumnSum(ctx, "contrib", 3 + N, {{"galpha", 3}, {"gbeta", N}});
  return success();
}

LogicalResult mlir::mhc::buildScale(KernelContext &ctx) {
  return ctx.spec.dir == ::mhc::Direction::Forward ? buildForward(ctx)
                                                   : buildBackward(ctx);
}
