//===- Scale.cpp - RMS scale and squash of the logits, gradient -----------===//
//
// Per-token work on N = 2n + n^2 floats: the forward takes a thread per
// (token, 4 logits) (per logit when n % 4 != 0), the backward 8 lanes per
// token. The backward's cross-token sums (galpha, gbeta) go through a
// per-token contribution row and the deterministic column sum.
//
//===----------------------------------------------------------------------===//

#include "builder/Streams.h"
#include "kernels/Kernels.h"

using namespace mlir;
using namespace mlir::mhc;
using ::mhc::BufferRole;
using ::mhc::DType;

namespace {
/// The segment of logit k: 0 (pre), 1 (post) or 2 (the n x n logits).
int segmentOf(int64_t k, int64_t n) { return k < n ? 0 : (k < 2 * n ? 1 : 2); }

void declareInputs(KernelContext &ctx) {
  DType param = ctx.spec.param;
  ctx.buffer("h", DType::F32, BufferRole::Input, {ctx.N(), 0});
  ctx.buffer("ms", DType::F32, BufferRole::Input, {1, 0});
  ctx.buffer("alpha", param, BufferRole::Input, {0, 3});
  ctx.buffer("beta", param, BufferRole::Input, {0, ctx.N()});
}
} // namespace

// Single-instruction rsqrt and sigmoid (~2^-22 relative, bound 1e-5): the
// forward is latency-bound, and libdevice's accurate sqrt, exp and divisions
// were most of each thread's work.
Value mlir::mhc::scaleRsqrt(KernelBuilder &kb, const ::mhc::KernelSpec &spec,
                            Value ms) {
  return kb.rsqrtApprox(kb.add(ms, kb.f32(spec.normEps)));
}

Value mlir::mhc::scaleSegment(KernelBuilder &kb, int64_t n, Value k) {
  return kb.add(kb.select(kb.lt(k, kb.idx(n)), kb.idx(0), kb.idx(1)),
                kb.select(kb.lt(k, kb.idx(2 * n)), kb.idx(0), kb.idx(1)));
}

Value mlir::mhc::scaleLogit(KernelBuilder &kb, Value alpha, Value h, Value r,
                            Value beta) {
  return kb.fma(kb.mul(alpha, h), r, beta);
}

Value mlir::mhc::scaleSquash(KernelBuilder &kb, const ::mhc::KernelSpec &spec,
                             Value z, bool pre) {
  double mult = pre ? 1.0 : spec.postMult, add = pre ? spec.preEps : 0.0;
  return kb.add(kb.mul(kb.f32(mult), kb.sigmoidApprox(z)), kb.f32(add));
}

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
  // A thread per token (N strided scalar loads) was four times slower
  // (docs/design/scale.md).
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
    Value r = scaleRsqrt(kb, ctx.spec, kb.toF32(kb.load(l.arg("ms"), m)));
    Value a = kb.toF32(kb.load(l.arg("alpha"), scaleSegment(kb, n, k)));
    SmallVector<Value> h =
        kb.loadF32(l.arg("h"), kb.add(kb.mul(m, kb.idx(N)), k), W);
    SmallVector<Value> beta = kb.loadF32(l.arg("beta"), k, W);
    SmallVector<Value> z;
    for (int64_t e = 0; e < W; ++e)
      z.push_back(scaleLogit(kb, a, h[e], r, beta[e]));
    auto squashed = [&](bool pre) {
      SmallVector<Value> out;
      for (Value v : z)
        out.push_back(scaleSquash(kb, ctx.spec, v, pre));
      return out;
    };
    kb.when(kb.lt(k, kb.idx(n)), [&] {
      kb.storeFrom(squashed(true), l.arg("pre"),
                   kb.add(kb.mul(m, kb.idx(n)), k));
    });
    kb.when(kb.andi(kb.lt(kb.idx(n - 1), k), kb.lt(k, kb.idx(2 * n))), [&] {
      kb.storeFrom(squashed(false), l.arg("post"),
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

  // A token per L = 8 lanes: lane l takes logits k = l + 8e, so each warp
  // access covers 4 tokens x 32 consecutive bytes; the token's sums are
  // butterflies over its 8 lanes in a fixed order (deterministic). A
  // thread per token (strided scalar loads and stores) was several times
  // slower (docs/design/scale.md).
  constexpr int64_t L = 8;
  const int threads = 128;
  const int64_t T = threads / L, E = (N + L - 1) / L;
  LaunchBuilder &l = ctx.launch("main");
  l.param("gpre").param("gpost").param("glogits").param("h").param("ms")
      .param("alpha").param("beta").param("gh").param("gms").param("contrib")
      .param("M").block(threads).grid({T, 0});
  KernelBuilder kb = ctx.begin(l);
  Value tid = kb.threadId(), lane = kb.rem(tid, kb.idx(L));
  Value m = kb.add(kb.mul(kb.blockId(), kb.idx(T)), kb.div(tid, kb.idx(L)));
  // Every lane takes part in the butterflies: tokens past M load token
  // M - 1 and store nothing.
  Value ok = kb.lt(m, l.tokens());
  Value mc = kb.min(m, kb.sub(l.tokens(), kb.idx(1)));
  // In f64: gms and galpha are sums with heavy cancellation, so fp32 term
  // errors would be amplified past fp32 accuracy for a single token.
  auto c = [&](double v) { return kb.f64(v); };
  auto wide = [&](Value v) { return kb.toF64(kb.toF32(v)); };
  auto store = [&](Value v, StringRef name, Value off) {
    kb.store(kb.toType(v, kb.b.getF32Type()), l.arg(name.str()), off);
  };
  Value one = c(1.0), zero = c(0.0);
  Value ms = wide(kb.load(l.arg("ms"), mc));
  Value r = kb.div(one, kb.sqrt(kb.add(ms, c(ctx.spec.normEps))));
  SmallVector<Value> alpha;
  for (int64_t s = 0; s < 3; ++s)
    alpha.push_back(wide(kb.load(l.arg("alpha"), kb.idx(s))));
  Value dot = zero; // sum_k gz_k alpha_k h_k
  SmallVector<Value> segment(3, zero);
  Value row = kb.mul(mc, kb.idx(3 + N));
  for (int64_t e = 0; e < E; ++e) {
    // The segments (pre, post, logits) this element's k = 8e + lane can
    // fall in; where that is one, no selects.
    int64_t kLo = L * e, kHi = std::min(L * e + L, N) - 1;
    int sLo = segmentOf(kLo, n), sHi = segmentOf(kHi, n);
    Value k = kb.add(lane, kb.idx(kLo));
    Value in = kLo + L <= N ? Value() : kb.lt(k, kb.idx(N));
    Value kc = in ? kb.min(k, kb.idx(N - 1)) : k;
    Value isPre = kb.lt(kc, kb.idx(n)), isLogit = kb.lt(kb.idx(2 * n - 1), kc);
    auto pick = [&](Value pre, Value post, Value logit) {
      if (sLo == sHi)
        return sLo == 0 ? pre : sLo == 1 ? post : logit;
      if (sHi == 1)
        return kb.select(isPre, pre, post);
      if (sLo == 1)
        return kb.select(isLogit, logit, post);
      return kb.select(isPre, pre, kb.select(isLogit, logit, post));
    };
    Value h = wide(kb.load(l.arg("h"), kb.add(kb.mul(mc, kb.idx(N)), kc)));
    Value beta = wide(kb.load(l.arg("beta"), kc));
    Value a = pick(alpha[0], alpha[1], alpha[2]);
    Value z = kb.fma(kb.mul(a, h), r, beta);
    Value gz;
    Value gzPre, gzPost, gzLogit;
    if (sLo <= 1) {
      // pre = sigmoid(z) (+ pre_eps), post = post_mult sigmoid(z).
      Value s = kb.sigmoid(z);
      Value i = kb.min(kb.select(isPre, kc, kb.sub(kc, kb.idx(n))), kb.idx(n - 1));
      Value off = kb.add(kb.mul(mc, kb.idx(n)), i);
      if (sLo == 0)
        gzPre = kb.mul(wide(kb.load(l.arg("gpre"), off)), kb.mul(s, kb.sub(one, s)));
      if (sHi >= 1) {
        Value post = kb.mul(c(ctx.spec.postMult), s);
        Value dpost = kb.mul(post, kb.sub(one, kb.div(post, c(ctx.spec.postMult))));
        gzPost = kb.mul(wide(kb.load(l.arg("gpost"), off)), dpost);
      }
    }
    if (sHi == 2) {
      Value i = sLo == 2 ? kb.sub(kc, kb.idx(2 * n))
                         : kb.select(isLogit, kb.sub(kc, kb.idx(2 * n)), kb.idx(0));
      gzLogit = wide(kb.load(l.arg("glogits"), kb.add(kb.mul(mc, kb.idx(n * n)), i)));
    }
    gz = pick(gzPre, gzPost, gzLogit);
    if (in)
      gz = kb.select(in, gz, zero);
    Value gzh = kb.mul(gz, h);
    dot = kb.fma(gzh, a, dot);
    for (int s = sLo; s <= sHi; ++s) {
      Value add = gzh;
      if (sLo != sHi)
        add = kb.select(s == 0 ? isPre : s == 2 ? isLogit
                                               : kb.andi(kb.lt(kb.idx(n - 1), kc),
                                                         kb.lt(kc, kb.idx(2 * n))),
                        gzh, zero);
      segment[s] = kb.add(segment[s], add);
    }
    Value valid = in ? kb.andi(ok, in) : ok;
    kb.when(valid, [&] {
      store(kb.mul(kb.mul(gz, a), r), "gh", kb.add(kb.mul(m, kb.idx(N)), k));
      store(gz, "contrib", kb.add(row, kb.add(kb.idx(3), k)));
    });
  }
  SmallVector<Value> sums = {dot, segment[0], segment[1], segment[2]};
  kb.laneGroupSum(sums, L);
  dot = sums[0];
  segment.assign(sums.begin() + 1, sums.end());
  kb.when(kb.andi(ok, kb.eq(lane, kb.idx(0))), [&] {
    for (int64_t s = 0; s < 3; ++s)
      store(kb.mul(segment[s], r), "contrib", kb.add(row, kb.idx(s)));
    Value r3 = kb.mul(kb.mul(r, r), r);
    store(kb.mul(kb.mul(c(-0.5), r3), dot), "gms", m);
  });
  emitColumnSum(ctx, "contrib", 3 + N, {{"galpha", 3}, {"gbeta", N}});
  return success();
}

LogicalResult mlir::mhc::buildScale(KernelContext &ctx) {
  return ctx.spec.dir == ::mhc::Direction::Forward ? buildForward(ctx)
                                                   : buildBackward(ctx);
}
