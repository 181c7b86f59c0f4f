//===- Forward.cpp - the projection forward's split-K contract ------------===//
//
// What the forward's variants share: h = (x w) phi^T and the sum of squares
// are computed split-K over S ranges of K chunks (S a function of M), each
// variant's "partial" launch writing fixed-order partials [S, M, N + 1] that
// the "reduce" launch here sums in order: deterministic, no atomics. The
// variants: ForwardStaged.cpp (bf16 x on sm_90+, where it fits) and
// ForwardTf32.cpp (every other spec).
//
//===----------------------------------------------------------------------===//

#include "kernels/project/Project.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"

using namespace mlir;
using namespace mlir::mhc;
using ::mhc::BufferRole;
using ::mhc::DType;

ProjectSplitK mlir::mhc::projectSplitK(KernelBuilder &kb, LaunchBuilder &l,
                                       int64_t chunks) {
  ProjectSplitK sk;
  sk.M = l.tokens();
  sk.S = l.splits();
  Value tid = kb.threadId(), bid = kb.blockId();
  sk.lane = kb.rem(tid, kb.idx(32));
  sk.warp = kb.div(tid, kb.idx(32));
  sk.g = kb.div(sk.lane, kb.idx(4));
  sk.t = kb.rem(sk.lane, kb.idx(4));
  sk.mBlock = kb.div(bid, sk.S);
  sk.split = kb.rem(bid, sk.S);
  sk.cBegin = kb.div(kb.mul(sk.split, kb.idx(chunks)), sk.S);
  sk.cEnd = kb.div(kb.mul(kb.add(sk.split, kb.idx(1)), kb.idx(chunks)), sk.S);
  return sk;
}

void mlir::mhc::storeProjectPartials(
    KernelBuilder &kb, const ProjectSplitK &sk, Value partials, Value row,
    Value ms, int64_t N, int64_t nTiles,
    function_ref<Value(int64_t, int64_t)> acc) {
  for (int offset : {1, 2}) {
    auto sh = gpu::ShuffleOp::create(kb.b, kb.loc, ms, offset, 32,
                                     gpu::ShuffleMode::XOR);
    ms = kb.add(ms, sh.getShuffleResult());
  }
  Value base = kb.mul(kb.add(kb.mul(sk.split, sk.M), row), kb.idx(N + 1));
  kb.when(kb.lt(row, sk.M), [&] {
    kb.when(kb.eq(sk.t, kb.idx(0)),
            [&] { kb.store(ms, partials, kb.add(base, kb.idx(N))); });
    for (int64_t nt = 0; nt < nTiles; ++nt)
      for (int64_t e = 0; e < 2; ++e) {
        Value col = kb.add(kb.idx(nt * 8 + e), kb.mul(sk.t, kb.idx(2)));
        Value val = acc(nt, e);
        kb.when(kb.lt(col, kb.idx(N)),
                [&] { kb.store(val, partials, kb.add(base, col)); });
      }
  });
}

int64_t mlir::mhc::projectRowAlignBytes(const KernelContext &ctx,
                                         DType dtype) {
  int64_t K = ctx.K(), bytes = ::mhc::byteWidth(dtype);
  return std::min<int64_t>(16, bytes * (K & -K)); // K & -K: K's lowest bit
}

void mlir::mhc::limitRowAccesses(const KernelContext &ctx, KernelBuilder &kb,
                                 LaunchBuilder &l,
                                 ArrayRef<const char *> names) {
  for (const char *name : names) {
    const ::mhc::BufferDesc *desc = ctx.manifest.buffer(name);
    if (!desc) // (weight, acc: where the spec has them, so has the launch)
      continue;
    int64_t align = projectRowAlignBytes(ctx, desc->dtype);
    if (align < 16)
      kb.accessLimit[l.arg(name)] = align;
  }
}

void mlir::mhc::declareProjectForwardIO(KernelContext &ctx) {
  const ::mhc::KernelSpec &spec = ctx.spec;
  int64_t N = ctx.N(), K = ctx.K();
  ctx.buffer("x", spec.act, BufferRole::Input, {K, 0});
  ctx.buffer("phi", spec.param, BufferRole::Input, {0, N * K});
  if (spec.hasWeight)
    ctx.buffer("weight", spec.param, BufferRole::Input, {0, K});
  ctx.buffer("h", DType::F32, BufferRole::Output, {N, 0});
  ctx.buffer("ms", DType::F32, BufferRole::Output, {1, 0});
}

LogicalResult mlir::mhc::buildProjectForwardPartials(KernelContext &ctx) {
  if (projectForwardIsStaged(ctx))
    return buildProjectForwardStaged(ctx);
  return buildProjectForwardTf32(ctx);
}

/// The reduce launch: h and ms from the partials [S, M, N + 1], summed over
/// S in order.
static void emitReduce(KernelContext &ctx) {
  int64_t N = ctx.N(), K = ctx.K();
  // A thread per (token, column): with few tokens S is large (up to 64)
  // and a thread per token would add S * (N + 1) values in sequence.
  const int rthreads = 256;
  int64_t width = N + 1, rows = rthreads / width;
  LaunchBuilder &l = ctx.launch("reduce");
  l.param("partials").param("h").param("ms").param("M").param("S")
      .block(rthreads).grid({rows, 0});
  KernelBuilder kb = ctx.begin(l);
  Value M = l.tokens(), tid = kb.threadId();
  Value m = kb.add(kb.mul(kb.blockId(), kb.idx(rows)), kb.div(tid, kb.idx(width)));
  Value col = kb.rem(tid, kb.idx(width));
  kb.when(kb.andi(kb.lt(tid, kb.idx(rows * width)), kb.lt(m, M)), [&] {
    Value item = kb.add(kb.mul(m, kb.idx(width)), col);
    Value stride = kb.mul(M, kb.idx(width));
    SmallVector<Value> sum = {kb.sumInOrder(
        kb.idx(0), l.splits(), kPartialsInFlight, [&](Value sp) {
          return kb.load(l.arg("partials"), kb.add(kb.mul(sp, stride), item));
        })};
    Value isMs = kb.eq(col, kb.idx(N));
    kb.when(isMs, [&] {
      kb.store(kb.div(sum[0], kb.f32(static_cast<double>(K))), l.arg("ms"), m);
    });
    kb.when(kb.lt(col, kb.idx(N)), [&] {
      kb.store(sum[0], l.arg("h"), kb.add(kb.mul(m, kb.idx(N)), col));
    });
  });
}

LogicalResult mlir::mhc::buildProjectForward(KernelContext &ctx) {
  if (failed(buildProjectForwardPartials(ctx)))
    return failure();
  emitReduce(ctx);
  return success();
}
