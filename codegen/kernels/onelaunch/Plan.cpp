//===- Plan.cpp - the one-launch kernel's plan ----------------------------===//
//
// The constants of a spec's one-launch forward (docs/design/serve.md): the
// blocks and their channel slices, phase 1's columns and thread groups, and
// the tile of tokens (and whether phi's slice is staged) that the
// architecture's shared memory holds.
//
//===----------------------------------------------------------------------===//

#include "builder/LaunchBuilder.h"
#include "kernels/onelaunch/Phases.h"

using namespace mlir;
using namespace mlir::mhc;
using namespace mlir::mhc::onelaunch;

Plan onelaunch::planOneLaunch(const KernelContext &ctx) {
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
