//===- ExpandCombine.cpp - out = P^T x + post (f + bias), gradient --------===//
//
// Forward: a stream of (token, w-wide channel chunk) items in memory order
// (forEachItem): f, bias and the n streams read once, the n output streams
// written once; n = 8 in the (C, n) layout on sm_90+ on bulk-copy rings
// (TokenRing.cpp) instead.
// Backward: one block per token computes gf and gx per element (gx plus acc,
// x's gradient from its other users, where the spec has it) and reduces
// gpost and gP over the channels in a fixed order. With a bias, gf is also
// kept in f32 and summed over tokens by the deterministic column sum (per-block
// partials added in order; no atomics). n = 4 and 8 in the (C, n) layout on
// sm_90+ (C % 32 == 0) take a block of eight warps per token fed by bulk
// copies instead (TokenRing.cpp).
//
//===----------------------------------------------------------------------===//

#include "builder/Streams.h"
#include "builder/TokenRing.h"
#include "kernels/Kernels.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;
using namespace mlir::mhc;
using ::mhc::BufferRole;
using ::mhc::DType;

/// The forward's inputs, which the backward reads too: f, post, x, P, bias.
static void declareInputs(KernelContext &ctx) {
  int64_t n = ctx.n(), C = ctx.C();
  DType act = ctx.spec.act;
  ctx.buffer("f", act, BufferRole::Input, {C, 0});
  ctx.buffer("post", DType::F32, BufferRole::Input, {n, 0});
  ctx.buffer("x", act, BufferRole::Input, {n * C, 0});
  ctx.buffer("P", DType::F32, BufferRole::Input, {n * n, 0});
  if (ctx.spec.hasBias)
    ctx.buffer("bias", ctx.spec.param, BufferRole::Input, {0, C});
}

/// The forward's main launch and its parameters, in the runtime's order.
static LaunchBuilder &forwardLaunch(KernelContext &ctx) {
  LaunchBuilder &l = ctx.launch("main");
  l.param("f").param("post").param("x").param("P");
  if (ctx.spec.hasBias)
    l.param("bias");
  return l.param("out").param("M");
}

/// out[j][e] = post_j f(e) + sum_i P_ij x(i, e) for w elements (stream-major).
static SmallVector<SmallVector<Value>>
combine(KernelBuilder &kb, int64_t n, int64_t w, ArrayRef<Value> post,
        ArrayRef<Value> P, function_ref<Value(int64_t)> f,
        function_ref<Value(int64_t, int64_t)> x) {
  SmallVector<SmallVector<Value>> out(n);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t e = 0; e < w; ++e)
      out[j].push_back(combineStream(kb, n, j, post, P, f(e),
                                     [&](int64_t i) { return x(i, e); }));
  return out;
}

/// n = 8's forward fed by bulk copies (TokenRing): f and x per piece, P and
/// post in registers; at n = 4 the item stream below is as fast and stays
/// (docs/design/streams.md).
static void buildForwardRing(KernelContext &ctx) {
  int64_t n = ctx.n();
  bool hasBias = ctx.spec.hasBias;
  TokenRing ring(ctx, {1, n});
  LaunchBuilder &l = forwardLaunch(ctx);
  ring.configure(l, 1); // no sums: one scratch float keeps the buffer numbering
  KernelBuilder kb = ctx.begin(l);
  SmallVector<Value> srcs = {l.arg("f"), l.arg("x")};
  ring.start(kb, l, srcs);
  Value m = ring.token;
  SmallVector<Value> post = loadRow(kb, l.arg("post"), m, n);
  SmallVector<Value> P = loadRow(kb, l.arg("P"), m, n * n);
  Type act = elementType(kb.b.getContext(), ctx.spec.act);
  ring.loop(kb, l, srcs, act, ValueRange{},
            [&](Value chan, ArrayRef<SmallVector<Value>> vals, SmallVector<Value> &) {
              Value fb = vals[0][0];
              if (hasBias)
                fb = kb.add(fb, kb.loadF32(l.arg("bias"), chan, 1)[0]);
              ArrayRef<Value> xs = vals[1];
              auto out = combine(
                  kb, n, 1, post, P, [&](int64_t) { return fb; },
                  [&](int64_t i, int64_t) { return xs[i]; });
              storeStreams(kb, ctx, l.arg("out"), m, chan, out);
            });
}

static LogicalResult buildForward(KernelContext &ctx) {
  int64_t n = ctx.n(), C = ctx.C(), w = ctx.streamWidth();
  DType act = ctx.spec.act;
  bool hasBias = ctx.spec.hasBias;
  declareInputs(ctx);
  ctx.buffer("out", act, BufferRole::Output, {n * C, 0});
  if (n == 8 && TokenRing::serves(ctx)) {
    buildForwardRing(ctx);
    return success();
  }

  StreamShape shape = streamShape(ctx, w, (n + 1) * w, n + n * n);
  // n = 4, 2-byte (C, n) on sm_90a: when 1024 items make whole tokens
  // (C % 2048 == 0), 512 threads x 2 items with evict-first stores, the
  // fastest shape measured there. Where blocks straddle tokens (C = 7168),
  // and on the archs not measured, 256 x 4 stays (docs/design/streams.md).
  bool wide = ctx.spec.arch == "sm_90a" && n == 4 &&
              ctx.spec.layout == ::mhc::Layout::CN &&
              ::mhc::byteWidth(act) == 2 && shape.chunks % 1024 == 0;
  if (wide) {
    shape.threads = 512;
    shape.perThread = 2;
  }
  LaunchBuilder &l = forwardLaunch(ctx);
  l.block(shape.threads).grid(shape.grid()).minBlocksPerSM(shape.minBlocks);
  KernelBuilder kb = ctx.begin(l);
  kb.streamingStores = wide;

  // Per item: f (w values, plus bias), then the n streams.
  auto load = [&](Value m, Value chunk) {
    Value c0 = kb.mul(chunk, kb.idx(w));
    SmallVector<Value> vals =
        kb.loadF32(l.arg("f"), kb.add(kb.mul(m, kb.idx(C)), c0), w);
    if (hasBias) {
      SmallVector<Value> bias = kb.loadF32(l.arg("bias"), c0, w);
      for (int64_t e = 0; e < w; ++e)
        vals[e] = kb.add(vals[e], bias[e]);
    }
    for (auto &stream : loadStreams(kb, ctx, l.arg("x"), m, c0, w))
      vals.append(stream.begin(), stream.end());
    return vals;
  };
  // Per token: post[j] then P[i][j], row-major.
  auto mix = [&](Value m) {
    SmallVector<Value> mix = loadRow(kb, l.arg("post"), m, n);
    mix.append(loadRow(kb, l.arg("P"), m, n * n));
    return mix;
  };
  auto finish = [&](Value m, Value chunk, ArrayRef<Value> vals, ArrayRef<Value> mix) {
    ArrayRef<Value> f = vals.take_front(w), xs = vals.drop_front(w);
    auto out = combine(
        kb, n, w, mix.take_front(n), mix.drop_front(n), [&](int64_t e) { return f[e]; },
        [&](int64_t i, int64_t e) { return xs[i * w + e]; });
    storeStreams(kb, ctx, l.arg("out"), m, kb.mul(chunk, kb.idx(w)), out);
  };
  forEachItem(kb, l, shape, load, mix, finish);
  return success();
}

/// The backward's main launch and its parameters, in the runtime's order.
static LaunchBuilder &backwardLaunch(KernelContext &ctx) {
  bool hasBias = ctx.spec.hasBias;
  LaunchBuilder &l = ctx.launch("main");
  l.param("gout").param("f").param("post").param("x").param("P");
  if (hasBias)
    l.param("bias");
  if (ctx.spec.acc)
    l.param("acc");
  l.param("gf").param("gpost").param("gx").param("gP");
  if (hasBias)
    l.param("gf32");
  return l.param("M");
}

/// Thread `tid` < n + n^2 of the block holds the token's total tid
/// (blockSum): gpost, then gP row-major.
static void storeSums(KernelBuilder &kb, LaunchBuilder &l, int64_t n, Value m,
                      Value tid, Value total) {
  kb.when(kb.lt(tid, kb.idx(n)), [&] {
    kb.store(total, l.arg("gpost"), kb.add(kb.mul(m, kb.idx(n)), tid));
  });
  kb.when(kb.andi(kb.lt(kb.idx(n - 1), tid), kb.lt(tid, kb.idx(n + n * n))), [&] {
    kb.store(total, l.arg("gP"), kb.add(kb.mul(m, kb.idx(n * n)), kb.sub(tid, kb.idx(n))));
  });
}

/// The backward fed by bulk copies (TokenRing): gout, x, f (and acc) per
/// piece, P, post and the n + n^2 sums in registers (n = 8: 210 registers,
/// no spills, one block per SM).
static void buildBackwardRing(KernelContext &ctx) {
  int64_t n = ctx.n(), C = ctx.C();
  bool hasBias = ctx.spec.hasBias, acc = ctx.spec.acc;
  int64_t reduced = n + n * n; // gpost, then gP row-major
  SmallVector<int64_t> values = {n, n, 1};
  if (acc)
    values.push_back(n);
  TokenRing ring(ctx, values);
  LaunchBuilder &l = backwardLaunch(ctx);
  ring.configure(l, reduced);
  KernelBuilder kb = ctx.begin(l);
  SmallVector<Value> srcs = {l.arg("gout"), l.arg("x"), l.arg("f")};
  if (acc)
    srcs.push_back(l.arg("acc"));
  ring.start(kb, l, srcs);
  Value m = ring.token;
  // Per token, while the first pieces load: post[j], P[i][j] (row-major).
  SmallVector<Value> post = loadRow(kb, l.arg("post"), m, n);
  SmallVector<Value> P = loadRow(kb, l.arg("P"), m, n * n);
  SmallVector<Value> zeros(reduced, kb.f32(0.0));
  Type act = elementType(kb.b.getContext(), ctx.spec.act);
  SmallVector<Value> part = ring.loop(
      kb, l, srcs, act, zeros,
      [&](Value chan, ArrayRef<SmallVector<Value>> vals, SmallVector<Value> &sums) {
        ArrayRef<Value> g = vals[0], xs = vals[1];
        Value fb = vals[2][0];
        if (hasBias)
          fb = kb.add(fb, kb.loadF32(l.arg("bias"), chan, 1)[0]);
        SmallVector<Value> gf;
        SmallVector<SmallVector<Value>> gx(n);
        expandCombineGradElement(
            kb, n, [&](int64_t j) { return post[j]; },
              [&](int64_t k) { return P[k]; }, [&](int64_t j) { return g[j]; },
            [&](int64_t i) { return xs[i]; }, fb, gf, gx, sums);
        if (acc)
          for (int64_t i = 0; i < n; ++i)
            gx[i][0] = plusAcc(kb, ctx.spec, gx[i][0], vals[3][i]);
        Value row = kb.add(kb.mul(m, kb.idx(C)), chan);
        kb.storeFrom(gf, l.arg("gf"), row);
        if (hasBias)
          kb.storeFrom(gf, l.arg("gf32"), row);
        storeStreams(kb, ctx, l.arg("gx"), m, chan, gx);
      });
  Value tid = kb.threadId();
  storeSums(kb, l, n, m, tid, blockSum(kb, 32 * TokenRing::kWarps, l.shared(0), part));
}

static LogicalResult buildBackward(KernelContext &ctx) {
  int64_t n = ctx.n(), C = ctx.C(), w = ctx.streamWidth();
  // Per element of a chunk a thread holds gout, x and gx of every stream;
  // P and the gpost/gP partials are held throughout. Narrow the chunk until
  // that fits in registers (n = 8 needs 1-wide chunks). (acc, read last,
  // does not narrow it: the chunk decides the order of the gpost/gP sums,
  // which must be the bits of the spec without acc.)
  while (w > 1 && 3 * n * w + 2 * n * n + n > 170)
    w /= 2;
  int64_t chunks = C / w;
  DType act = ctx.spec.act;
  bool hasBias = ctx.spec.hasBias;
  ctx.buffer("gout", act, BufferRole::Input, {n * C, 0});
  declareInputs(ctx);
  declareAcc(ctx);
  ctx.buffer("gf", act, BufferRole::Output, {C, 0});
  ctx.buffer("gpost", DType::F32, BufferRole::Output, {n, 0});
  ctx.buffer("gx", ctx.spec.gxType(), BufferRole::Output, {n * C, 0}); // f32: acc=f32
  ctx.buffer("gP", DType::F32, BufferRole::Output, {n * n, 0});
  if (hasBias) {
    ctx.buffer("gbias", ctx.spec.param, BufferRole::Output, {0, C});
    // gf before rounding to the activation dtype, for an f32-exact gbias.
    ctx.buffer("gf32", DType::F32, BufferRole::Workspace, {C, 0});
  }

  if (TokenRing::serves(ctx)) {
    buildBackwardRing(ctx);
    if (hasBias)
      emitColumnSum(ctx, "gf32", C, {{"gbias", C}});
    return success();
  }

  // Large n with 2-byte activations (n = 8 in the (n, C) layout or on sm_80:
  // 72 partial sums and 64 P values per thread): P waits in shared memory, read back per chunk as broadcast
  // 16-byte loads (volatile, so that LLVM does not hoist them back into
  // registers), which frees the registers for four chunks in flight per
  // thread, in blocks of 128 threads, three per SM (<= 170 registers); the
  // shapes measured against it are in docs/design/streams.md.
  bool large = 2 * n * n + n > 128 && ::mhc::byteWidth(act) == 2;
  const int threads = large ? 128 : 256;
  int unroll = large ? 4 : 2;
  int64_t reduced = n + n * n; // gpost, then gP row-major
  LaunchBuilder &l = backwardLaunch(ctx);
  l.block(threads).grid({1, 0}).sharedF32((threads / 32) * reduced);
  if (large)
    l.sharedF32(n * n, 16).minBlocksPerSM(3);
  KernelBuilder kb = ctx.begin(l);
  Value tid = kb.threadId(), m = kb.blockId();
  SmallVector<Value> post;
  for (int64_t j = 0; j < n; ++j)
    post.push_back(kb.load(l.arg("post"), kb.add(kb.mul(m, kb.idx(n)), kb.idx(j))));
  SmallVector<Value> P;
  if (large) {
    kb.when(kb.lt(tid, kb.idx(n * n)), [&] {
      kb.store(kb.load(l.arg("P"), kb.add(kb.mul(m, kb.idx(n * n)), tid)), l.shared(1), tid);
    });
    kb.barrier();
  } else {
    for (int64_t k = 0; k < n * n; ++k)
      P.push_back(kb.load(l.arg("P"), kb.add(kb.mul(m, kb.idx(n * n)), kb.idx(k))));
  }
  SmallVector<Value> zeros(reduced, kb.f32(0.0));
  Type f32x4 = VectorType::get({4}, kb.b.getF32Type());
  SmallVector<Value> part = chunkLoop(
      kb, chunks, threads, unroll, zeros,
      [&](Value chunk, ValueRange it) {
        SmallVector<Value> next(it.begin(), it.end());
        if (large) {
          P.clear();
          for (int64_t k = 0; k < n * n; k += 4) {
            Value v = LLVM::LoadOp::create(kb.b, kb.loc, f32x4, kb.sharedPtr(l.shared(1), kb.idx(k)), 16,
                                           /*volatile=*/true);
            for (int64_t e = 0; e < 4; ++e)
              P.push_back(kb.extract(v, e));
          }
        }
        Value c0 = kb.mul(chunk, kb.idx(w));
        Value row = kb.add(kb.mul(m, kb.idx(C)), c0);
        auto g = loadStreams(kb, ctx, l.arg("gout"), m, c0, w);
        auto xs = loadStreams(kb, ctx, l.arg("x"), m, c0, w);
        SmallVector<SmallVector<Value>> acc;
        if (ctx.spec.acc)
          acc = loadStreams(kb, ctx, l.arg("acc"), m, c0, w);
        SmallVector<Value> fb = kb.loadF32(l.arg("f"), row, w);
        if (hasBias) {
          SmallVector<Value> bias = kb.loadF32(l.arg("bias"), c0, w);
          for (int64_t e = 0; e < w; ++e)
            fb[e] = kb.add(fb[e], bias[e]);
        }
        SmallVector<Value> gf;
        SmallVector<SmallVector<Value>> gx(n);
        for (int64_t e = 0; e < w; ++e)
          expandCombineGradElement(
              kb, n, [&](int64_t j) { return post[j]; },
              [&](int64_t k) { return P[k]; }, [&](int64_t j) { return g[j][e]; },
              [&](int64_t i) { return xs[i][e]; }, fb[e], gf, gx, next);
        for (int64_t i = 0; i < (int64_t)acc.size(); ++i)
          for (int64_t e = 0; e < w; ++e)
            gx[i][e] = plusAcc(kb, ctx.spec, gx[i][e], acc[i][e]);
        kb.storeFrom(gf, l.arg("gf"), row);
        if (hasBias)
          kb.storeFrom(gf, l.arg("gf32"), row);
        storeStreams(kb, ctx, l.arg("gx"), m, c0, gx);
        return next;
      });
  storeSums(kb, l, n, m, tid, blockSum(kb, threads, l.shared(), part));
  if (hasBias)
    emitColumnSum(ctx, "gf32", C, {{"gbias", C}});
  return success();
}

LogicalResult mlir::mhc::buildExpandCombine(KernelContext &ctx) {
  return ctx.spec.dir == ::mhc::Direction::Forward ? buildForward(ctx)
                                                   : buildBackward(ctx);
}
