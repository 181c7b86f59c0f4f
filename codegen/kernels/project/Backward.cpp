//===- Backward.cpp - the projection backward's variants ------------------===//
//
// gx = (gh phi) w + (2/K) gms x, gphi = gh^T (x w), gw = sum over tokens of
// x (gh phi): the variant that serves the spec, and the buffers all of them
// declare.
//
//===----------------------------------------------------------------------===//

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
  ctx.buffer("gx", spec.act, BufferRole::Output, {K, 0});
  ctx.buffer("gphi", spec.param, BufferRole::Output, {0, N * K});
  if (spec.hasWeight)
    ctx.buffer("gweight", spec.param, BufferRole::Output, {0, K});
}

LogicalResult mlir::mhc::buildProjectBackward(KernelContext &ctx) {
  // The one-wave kernel takes precedence where both wgmma kernels serve.
  if (projectBackwardIsWide(ctx))
    return buildProjectBackwardWide(ctx);
  if (projectBackwardIsWgmma(ctx))
    return buildProjectBackwardWgmma(ctx);
  return buildProjectBackwardMma(ctx);
}
