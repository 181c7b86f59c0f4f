//===- TokenRing.cpp - per-token kernels fed by per-warp bulk-copy rings --===//
//
// The backward of aggregate and expand_combine for n = 4 and 8 (and n = 8's
// expand_combine forward), 2-byte activations in the (C, n) layout on sm_90+: a block of eight warps per
// token, each warp taking the token's pieces of 1024 / n channels in turn
// through its own three-stage ring in shared memory. Lane 0 fills a stage
// with one bulk copy per source (gout and x: a piece's n values per
// channel, contiguous in this layout; f or gy: one per channel), completing
// on the stage's mbarrier, so the bytes in flight (~13 KB per warp) hold no
// registers; the lanes read a channel's values back as one shared load
// each and keep the per-token values and partial sums in registers.
//
// Why: a register-fed backward has room for about two channels' loads in
// flight per thread beside n = 8's 72 sums, too few to reach the copy rate;
// the rings' bytes in flight hold no registers (docs/design/streams.md).
//
//===----------------------------------------------------------------------===//

#include "builder/TokenRing.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;
using namespace mlir::mhc;

/// Channels per piece: 1024 / n (2 KB of each stream source) when C allows
/// it, down to 32 (a channel per lane).
static int64_t pieceChannels(int64_t n, int64_t C) {
  for (int64_t ch = 1024 / n; ch >= 32; ch /= 2)
    if (C % ch == 0)
      return ch;
  return 0;
}

bool TokenRing::serves(const KernelContext &ctx) {
  const ::mhc::KernelSpec &spec = ctx.spec;
  return (spec.n == 4 || spec.n == 8) && ::mhc::byteWidth(spec.act) == 2 &&
         spec.layout == ::mhc::Layout::CN && spec.arch != "sm_80" &&
         pieceChannels(spec.n, ctx.C()) > 0;
}

TokenRing::TokenRing(const KernelContext &ctx, ArrayRef<int64_t> values)
    : C(ctx.C()), values(values.begin(), values.end()) {
  ch = pieceChannels(ctx.n(), C);
  // The same bytes in flight per warp whatever the piece.
  depth = 3 * (1024 / ctx.n()) / ch;
  pieces = C / ch;
  for (int64_t v : values) {
    offsets.push_back(stageBytes);
    stageBytes += ch * v * 2; // a multiple of 64 bytes
  }
}

void TokenRing::configure(LaunchBuilder &l, int64_t reduced) const {
  l.block(32 * kWarps).grid({1, 0})
      .sharedF32(kWarps * reduced)
      .sharedF32(kWarps * depth * stageBytes / 4, /*align=*/128)
      .sharedI64(kWarps * depth)
      .minBlocksPerSM(1);
}

Value TokenRing::stageOf(KernelBuilder &kb, Value k) const {
  return kb.add(kb.mul(warp, kb.idx(depth)), kb.rem(k, kb.idx(depth)));
}

Value TokenRing::firstChannel(KernelBuilder &kb, Value k) const {
  return kb.mul(kb.add(warp, kb.mul(k, kb.idx(kWarps))), kb.idx(ch));
}

void TokenRing::issue(KernelBuilder &kb, LaunchBuilder &l, ArrayRef<Value> srcs,
                      Value k) const {
  Value stage = stageOf(kb, k);
  Value bar = kb.sharedPtr(l.shared(2), stage);
  Value base = kb.mul(stage, kb.idx(stageBytes / 4));
  Value row = kb.add(kb.mul(token, kb.idx(C)), firstChannel(kb, k));
  kb.mbarrierArriveExpectTx(bar, stageBytes);
  for (size_t s = 0; s < srcs.size(); ++s)
    kb.bulkCopy(kb.sharedPtr(l.shared(1), kb.add(base, kb.idx(offsets[s] / 4))),
                kb.globalPtr(srcs[s], kb.mul(row, kb.idx(values[s]))),
                ch * values[s] * 2, bar);
}

void TokenRing::start(KernelBuilder &kb, LaunchBuilder &l, ArrayRef<Value> srcs) {
  Value tid = kb.threadId();
  token = kb.blockId();
  lane = kb.rem(tid, kb.idx(32));
  warp = kb.div(tid, kb.idx(32));
  // This warp's pieces: warp, warp + 8, ...
  count = kb.div(kb.sub(kb.idx(pieces + kWarps - 1), warp), kb.idx(kWarps));
  kb.when(kb.eq(tid, kb.idx(0)), [&] {
    for (int64_t s = 0; s < kWarps * depth; ++s)
      kb.mbarrierInit(kb.sharedPtr(l.shared(2), kb.idx(s)), 1);
    kb.fenceMbarrierInit();
  });
  kb.barrier();
  kb.when(kb.eq(lane, kb.idx(0)), [&] {
    kb.loop(kb.idx(0), kb.min(count, kb.idx(depth)), kb.idx(1),
            [&](Value k) { issue(kb, l, srcs, k); });
  });
}

SmallVector<Value>
TokenRing::loop(KernelBuilder &kb, LaunchBuilder &l, ArrayRef<Value> srcs,
                Type act, ValueRange init,
                function_ref<void(Value, ArrayRef<SmallVector<Value>>,
                                  SmallVector<Value> &)>
                    body) const {
  MLIRContext *mctx = kb.b.getContext();
  auto ptrType = LLVM::LLVMPointerType::get(
      mctx, static_cast<unsigned>(NVVM::NVVMMemorySpace::Shared));
  Value ring = l.shared(1);
  return kb.loop(
      kb.idx(0), count, kb.idx(1), init, [&](Value k, ValueRange it) {
        SmallVector<Value> acc(it.begin(), it.end());
        Value stage = stageOf(kb, k);
        Value parity = kb.indexToI32(kb.rem(kb.div(k, kb.idx(depth)), kb.idx(2)));
        kb.mbarrierWait(kb.sharedPtr(l.shared(2), stage), parity);
        Value base = kb.sharedPtr(ring, kb.mul(stage, kb.idx(stageBytes / 4)));
        Value c0 = firstChannel(kb, k);
        // Channel lane + 32q: the warp's reads of a stage are consecutive.
        for (int64_t q = 0; q < ch / 32; ++q) {
          Value c = kb.add(lane, kb.idx(32 * q));
          SmallVector<SmallVector<Value>> vals;
          for (size_t s = 0; s < values.size(); ++s) {
            int64_t v = values[s];
            Value at = kb.indexToI64(kb.add(kb.idx(offsets[s]), kb.mul(c, kb.idx(2 * v))));
            Value ptr = LLVM::GEPOp::create(kb.b, kb.loc, ptrType, kb.b.getI8Type(), base,
                                            ValueRange{at});
            Type t = v == 1 ? act : VectorType::get({v}, act);
            Value raw = LLVM::LoadOp::create(kb.b, kb.loc, t, ptr, 2 * v);
            Value f = kb.toF32(raw);
            SmallVector<Value> out;
            for (int64_t e = 0; e < v; ++e)
              out.push_back(v == 1 ? f : kb.extract(f, e));
            vals.push_back(out);
          }
          body(kb.add(c0, c), vals, acc);
        }
        // Every lane's reads of the stage are ordered before the bulk copy
        // that refills it.
        kb.fenceProxyAsyncShared();
        kb.syncWarp();
        Value ahead = kb.add(k, kb.idx(depth));
        kb.when(kb.andi(kb.eq(lane, kb.idx(0)), kb.lt(ahead, count)),
                [&] { issue(kb, l, srcs, ahead); });
        return acc;
      });
}
