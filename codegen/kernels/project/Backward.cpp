//===- Backward.cpp - the projection backward's variants ------------------===//
//
// gx = (gh phi) w + (2/K) gms x (plus acc, x's gradient from its other
// users, where the spec has it), gphi = gh^T (x w), gw = sum over tokens of
// x (gh phi): the variant that serves the spec, and the buffers all of them
// declare. With acc the mma.sync kernel, and the one-wave kernel where it
// stores gx in pieces, add it where they store gx; the one-wave and wgmma
// kernels that store gx from shared memory by TMA are followed by launch
// "acc" (docs/design/project.md, "acc").
//
//===----------------------------------------------------------------------===//

#include "builder/Streams.h"
#include "kernels/project/Project.h"

using namespace mlir;
using namespace mlir::mhc;
using ::mhc::BufferRole;
using ::mhc::DType;

void mlir::mhc::declareProjectBackwardIO(KernelContext &ctx) {
  const ::mhc::KernelSpec &spec = ctx.spec;
  const int64_t N = ctx.N(), K = ctx.K();
  ctx.buffer("gh", DType::F32, BufferRole::Input, {N, 0});
  ctx.buffer("gms", DType::F32, BufferRole::Input, {1, 0});
  ctx.buffer("x", spec.act, BufferRole::Input, {K, 0});
  ctx.buffer("phi", spec.param, BufferRole::Input, {0, N * K});
  if (spec.hasWeight)
    ctx.buffer("weight", spec.param, BufferRole::Input, {0, K});
  declareAcc(ctx);
  ctx.buffer("gx", spec.act, BufferRole::Output, {K, 0});
  ctx.buffer("gphi", spec.param, BufferRole::Output, {0, N * K});
  if (spec.hasWeight)
    ctx.buffer("gweight", spec.param, BufferRole::Output, {0, K});
}

/// Launch "acc" after the one-wave and wgmma kernels: gx += acc in place, a
/// block per token, 16-byte accesses. gx already holds own rounded to the
/// activation dtype, so one f32 add and the store's rounding give
/// own.add(acc) bit for bit, for the unfused add's traffic.
static void emitAccLaunch(KernelContext &ctx) {
  const int64_t K = ctx.K(), w = 16 / ::mhc::byteWidth(ctx.spec.act);
  const int threads = 256;
  LaunchBuilder &l = ctx.launch("acc");
  l.param("acc").param("gx").param("M").block(threads).grid({1, 0});
  KernelBuilder kb = ctx.begin(l);
  Value row = kb.mul(kb.blockId(), kb.idx(K));
  chunkLoop(kb, K / w, threads, 2, ValueRange{}, [&](Value chunk, ValueRange) {
    Value at = kb.add(row, kb.mul(chunk, kb.idx(w)));
    SmallVector<Value> gx = kb.loadF32(l.arg("gx"), at, w);
    SmallVector<Value> acc = kb.loadF32(l.arg("acc"), at, w);
    for (int64_t e = 0; e < w; ++e)
      gx[e] = kb.add(gx[e], acc[e]);
    kb.storeFrom(gx, l.arg("gx"), at);
    return SmallVector<Value>{};
  });
}

LogicalResult mlir::mhc::buildProjectBackward(KernelContext &ctx) {
  // The one-wave kernel takes precedence where both wgmma kernels serve.
  bool wide = projectBackwardIsWide(ctx);
  if (!wide && !projectBackwardIsWgmma(ctx))
    return buildProjectBackwardMma(ctx);
  if (failed(wide ? buildProjectBackwardWide(ctx) : buildProjectBackwardWgmma(ctx)))
    return failure();
  if (ctx.spec.readsAcc() && !(wide && projectBackwardWideAddsAcc(ctx)))
    emitAccLaunch(ctx);
  return success();
}
