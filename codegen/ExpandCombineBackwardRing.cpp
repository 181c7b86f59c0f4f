//===- ExpandCombineBackwardRing.cpp - backward fed by bulk copies -------===//
//
// The expand_combine backward for n = 4 and 8, 2-byte activations in the
// (C, n) layout on sm_90+: a block of eight warps per token, each warp
// taking the token's pieces of CH channels in turn through its own ring of
// shared-memory stages. Lane 0 of the warp fills a stage with three bulk
// copies (gout's and x's CH * n values and f's CH, all contiguous in this
// layout) that complete on the stage's mbarrier, so the loads in flight
// hold no registers: P, post and the n + n^2 partial sums of gpost and gP
// stay in registers, and the lanes read their channel's n values back as
// one 2n-byte shared load. The per-token sums are reduced over the block in
// a fixed order (blockSum).
//
// Why: the register-fed kernel (ExpandCombineKernels.cpp) had room for about
// two channels' loads in flight per thread beside n = 8's 72 sums and
// reached 91% of the copy bandwidth (ncu: DRAM 80%, 3 warps per scheduler,
// 0.59 eligible). A CUDA C probe of this design (.te/probe/ec_ring.cu, the
// fifteenth session) measured 4046 us against 4492 us at n = 8, M = 32768,
// C = 7168 on H100 (3.02 TB/s, the copy rate): eight warps in one block per
// SM, 128-channel pieces, three stages (two to four within 1%; four warps
// in two blocks per SM 4098-4105 us). In the product: n = 8 4492 -> 4042
// us, n = 4 2228 -> 2177 us (98% -> 101% of the copy rate).
//
//===----------------------------------------------------------------------===//

#include "Families.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;
using namespace mlir::mhc;

namespace {
constexpr int64_t kWarps = 8;

/// Channels per piece: 1024 / n (2 KB of gout and of x) when C allows it,
/// down to 32 (a channel per lane); the stages then keep ~13 KB per warp in
/// flight whatever the piece.
int64_t pieceChannels(int64_t n, int64_t C) {
  for (int64_t ch = 1024 / n; ch >= 32; ch /= 2)
    if (C % ch == 0)
      return ch;
  return 0;
}
} // namespace

bool mlir::mhc::expandCombineBackwardIsRing(const KernelContext &ctx) {
  const ::mhc::KernelSpec &spec = ctx.spec;
  return (spec.n == 4 || spec.n == 8) && ::mhc::byteWidth(spec.act) == 2 &&
         spec.layout == ::mhc::Layout::CN && spec.arch != "sm_80" &&
         pieceChannels(spec.n, ctx.C()) > 0;
}

void mlir::mhc::emitExpandCombineBackwardRing(KernelContext &ctx) {
  const ::mhc::KernelSpec &spec = ctx.spec;
  int64_t n = ctx.n(), C = ctx.C();
  bool hasBias = spec.hasBias;
  int64_t ch = pieceChannels(n, C), depth = 3 * (1024 / n) / ch;
  int64_t pieces = C / ch;
  // A stage: gout [ch][n], x [ch][n], f [ch] (bytes; a multiple of 16).
  int64_t rowBytes = ch * n * 2;
  int64_t stageBytes = 2 * rowBytes + ch * 2;
  int64_t stageFloats = stageBytes / 4;
  int64_t reduced = n + n * n; // gpost, then gP row-major
  const int threads = 32 * kWarps;

  LaunchBuilder &l = ctx.launch("main");
  l.param("gout").param("f").param("post").param("x").param("P");
  if (hasBias)
    l.param("bias");
  l.param("gf").param("gpost").param("gx").param("gP");
  if (hasBias)
    l.param("gf32");
  l.param("M").block(threads).grid({1, 0})
      .sharedF32(kWarps * reduced)
      .sharedF32(kWarps * depth * stageFloats, /*align=*/128)
      .sharedI64(kWarps * depth)
      .minBlocksPerSM(1);
  KernelBuilder kb = ctx.begin(l);
  Value tid = kb.threadId(), m = kb.blockId();
  Value lane = kb.rem(tid, kb.idx(32)), warp = kb.div(tid, kb.idx(32));
  Value ring = l.shared(1), bars = l.shared(2);
  Value isProducer = kb.eq(lane, kb.idx(0));
  // This warp's pieces: warp, warp + 8, ...
  Value count = kb.div(kb.sub(kb.idx(pieces + kWarps - 1), warp), kb.idx(kWarps));
  Value warpStage0 = kb.mul(warp, kb.idx(depth));
  auto stageOf = [&](Value k) { return kb.add(warpStage0, kb.rem(k, kb.idx(depth))); };
  auto full = [&](Value stage) { return kb.sharedPtr(bars, stage); };

  kb.when(kb.eq(tid, kb.idx(0)), [&] {
    for (int64_t s = 0; s < kWarps * depth; ++s)
      kb.mbarrierInit(full(kb.idx(s)), 1);
    kb.fenceMbarrierInit();
  });
  kb.barrier();
  // Lane 0: piece k of this warp into its stage.
  auto issue = [&](Value k) {
    Value stage = stageOf(k);
    Value c0 = kb.mul(kb.add(warp, kb.mul(k, kb.idx(kWarps))), kb.idx(ch));
    Value base = kb.mul(stage, kb.idx(stageFloats));
    Value bar = full(stage);
    Value row = kb.add(kb.mul(m, kb.idx(C)), c0);
    kb.mbarrierArriveExpectTx(bar, stageBytes);
    kb.bulkCopy(kb.sharedPtr(ring, base), kb.globalPtr(l.arg("gout"), kb.mul(row, kb.idx(n))),
                rowBytes, bar);
    kb.bulkCopy(kb.sharedPtr(ring, kb.add(base, kb.idx(rowBytes / 4))),
                kb.globalPtr(l.arg("x"), kb.mul(row, kb.idx(n))), rowBytes, bar);
    kb.bulkCopy(kb.sharedPtr(ring, kb.add(base, kb.idx(2 * rowBytes / 4))),
                kb.globalPtr(l.arg("f"), row), ch * 2, bar);
  };
  kb.when(isProducer, [&] {
    kb.loop(kb.idx(0), kb.min(count, kb.idx(depth)), kb.idx(1), [&](Value k) { issue(k); });
  });

  // Per token: post[j], P[i][j] (row-major), while the first pieces load.
  SmallVector<Value> post = loadRow(kb, l.arg("post"), m, n);
  SmallVector<Value> P = loadRow(kb, l.arg("P"), m, n * n);
  Type act = elementType(kb.b.getContext(), spec.act);
  Type actRow = VectorType::get({n}, act);
  auto ptrType = LLVM::LLVMPointerType::get(
      kb.b.getContext(), static_cast<unsigned>(NVVM::NVVMMemorySpace::Shared));

  SmallVector<Value> zeros(reduced, kb.f32(0.0));
  SmallVector<Value> part = kb.loop(
      kb.idx(0), count, kb.idx(1), zeros, [&](Value k, ValueRange it) {
        SmallVector<Value> next(it.begin(), it.end());
        Value stage = stageOf(k);
        Value parity = kb.indexToI32(kb.rem(kb.div(k, kb.idx(depth)), kb.idx(2)));
        kb.mbarrierWait(full(stage), parity);
        Value base = kb.mul(stage, kb.idx(stageFloats));
        Value c0 = kb.mul(kb.add(warp, kb.mul(k, kb.idx(kWarps))), kb.idx(ch));
        // Channel lane + 32q: the warp's reads of a stage are consecutive.
        for (int64_t q = 0; q < ch / 32; ++q) {
          Value c = kb.add(lane, kb.idx(32 * q));
          auto streams = [&](int64_t at) {
            Value off = kb.add(base, kb.add(kb.idx(at / 4), kb.mul(c, kb.idx(n / 2))));
            Value raw = LLVM::LoadOp::create(kb.b, kb.loc, actRow, kb.sharedPtr(ring, off), 2 * n);
            Value v = kb.toF32(raw);
            SmallVector<Value> out;
            for (int64_t e = 0; e < n; ++e)
              out.push_back(kb.extract(v, e));
            return out;
          };
          SmallVector<Value> g = streams(0), xs = streams(rowBytes);
          Value fPtr = LLVM::GEPOp::create(
              kb.b, kb.loc, ptrType, kb.b.getI8Type(),
              kb.sharedPtr(ring, kb.add(base, kb.idx(2 * rowBytes / 4))),
              ValueRange{kb.indexToI64(kb.mul(c, kb.idx(2)))});
          Value fb = kb.toF32(LLVM::LoadOp::create(kb.b, kb.loc, act, fPtr, 2));
          Value chan = kb.add(c0, c);
          if (hasBias)
            fb = kb.add(fb, kb.loadF32(l.arg("bias"), chan, 1)[0]);
          Value gf = kb.mul(post[0], g[0]);
          for (int64_t j = 1; j < n; ++j)
            gf = kb.fma(post[j], g[j], gf);
          SmallVector<SmallVector<Value>> gx(n);
          for (int64_t i = 0; i < n; ++i) {
            Value gxi = kb.mul(P[i * n], g[0]);
            for (int64_t j = 1; j < n; ++j)
              gxi = kb.fma(P[i * n + j], g[j], gxi);
            gx[i].push_back(gxi);
          }
          for (int64_t j = 0; j < n; ++j)
            next[j] = kb.fma(fb, g[j], next[j]);
          for (int64_t i = 0; i < n; ++i)
            for (int64_t j = 0; j < n; ++j)
              next[n + i * n + j] = kb.fma(xs[i], g[j], next[n + i * n + j]);
          Value row = kb.add(kb.mul(m, kb.idx(C)), chan);
          kb.storeFrom({gf}, l.arg("gf"), row);
          if (hasBias)
            kb.storeFrom({gf}, l.arg("gf32"), row);
          storeStreams(kb, ctx, l.arg("gx"), m, chan, gx);
        }
        // Every lane's reads of the stage are ordered before the bulk copy
        // that refills it.
        kb.fenceProxyAsyncShared();
        kb.syncWarp();
        Value ahead = kb.add(k, kb.idx(depth));
        kb.when(kb.andi(isProducer, kb.lt(ahead, count)), [&] { issue(ahead); });
        return next;
      });
  Value total = blockSum(kb, threads, l.shared(0), part);
  kb.when(kb.lt(tid, kb.idx(n)), [&] {
    kb.store(total, l.arg("gpost"), kb.add(kb.mul(m, kb.idx(n)), tid));
  });
  kb.when(kb.andi(kb.lt(kb.idx(n - 1), tid), kb.lt(tid, kb.idx(reduced))), [&] {
    kb.store(total, l.arg("gP"), kb.add(kb.mul(m, kb.idx(n * n)), kb.sub(tid, kb.idx(n))));
  });
}
