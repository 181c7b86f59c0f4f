//===- BulkRing.cpp - shared-memory stages filled by bulk copies ----------===//
//
// The hand-over both staged projection kernels use: thread 0 is the
// producer (bulk copies completing on a full mbarrier), every warp a
// consumer (an arrival on the empty mbarrier when done); and the pacing of
// the producers of a wave of blocks (WavePacer).
//
//===----------------------------------------------------------------------===//

#include "builder/Rings.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"

using namespace mlir;
using namespace mlir::mhc;

BulkRing::BulkRing(KernelBuilder &kb, Value bars, int64_t stages, int64_t warps,
                   bool everyLane)
    : kb(kb), bars(bars), leader(kb.eq(kb.threadId(), kb.idx(0))),
      stages(stages), warps(warps), everyLane(everyLane) {}

Value BulkRing::stage(Value i) { return kb.rem(i, kb.idx(stages)); }
Value BulkRing::full(Value st) { return kb.sharedPtr(bars, st); }
Value BulkRing::empty(Value st) {
  return kb.sharedPtr(bars, kb.add(st, kb.idx(stages)));
}

Value BulkRing::parity(Value i) {
  Value p = kb.rem(kb.div(i, kb.idx(stages)), kb.idx(2));
  return kb.indexToI32(p);
}

void BulkRing::init() {
  kb.when(leader, [&] {
    for (int64_t s = 0; s < stages; ++s) {
      kb.mbarrierInit(full(kb.idx(s)), 1);
      kb.mbarrierInit(empty(kb.idx(s)), everyLane ? 32 * warps : warps);
    }
    kb.fenceMbarrierInit();
  });
  kb.barrier();
}

void BulkRing::start(Value count, function_ref<void(Value, Value)> issue) {
  init();
  kb.when(leader, [&] {
    kb.loop(kb.idx(0), kb.min(kb.idx(stages - 1), count), kb.idx(1),
            [&](Value i) { issue(i, i); });
  });
}

Value BulkRing::acquire(Value i, Value count,
                        function_ref<void(Value, Value)> issue) {
  Value ahead = kb.add(i, kb.idx(stages - 1));
  kb.when(kb.andi(leader, kb.lt(ahead, count)), [&] {
    Value next = stage(ahead);
    kb.when(kb.lt(kb.idx(0), i), [&] {
      kb.mbarrierWait(empty(next), parity(kb.sub(i, kb.idx(1))));
    });
    issue(ahead, next);
  });
  Value st = stage(i);
  kb.mbarrierWait(full(st), parity(i));
  return st;
}

void BulkRing::release(Value i, Value lane) {
  kb.fenceProxyAsyncShared();
  if (everyLane) {
    kb.mbarrierArrive(empty(stage(i)));
    return;
  }
  kb.syncWarp();
  kb.when(kb.eq(lane, kb.idx(0)), [&] { kb.mbarrierArrive(empty(stage(i))); });
}

void BulkRing::produce(Value i, function_ref<void(Value)> issue) {
  Value st = stage(i);
  kb.when(kb.lt(kb.idx(stages - 1), i), [&] {
    kb.mbarrierWait(empty(st), parity(kb.sub(i, kb.idx(stages))));
  });
  issue(st);
}

Value BulkRing::wait(Value i) {
  Value st = stage(i);
  kb.mbarrierWait(full(st), parity(i));
  return st;
}

WavePacer::WavePacer(KernelBuilder &kb, Value counter, Value flag, Value peers,
                     int64_t epoch, int64_t lag, Value on)
    : kb(kb), counter(counter), flag(flag), peers(peers), on(on), epoch(epoch),
      lag(lag) {
  Value start = on ? kb.select(on, kb.i32(1), kb.i32(0)) : kb.i32(1);
  LLVM::StoreOp::create(kb.b, kb.loc, start, flag);
}

void WavePacer::before(Value i) {
  Value pacing = arith::CmpIOp::create(
      kb.b, kb.loc, arith::CmpIPredicate::ne,
      LLVM::LoadOp::create(kb.b, kb.loc, kb.b.getI32Type(), flag), kb.i32(0));
  Value e = kb.div(i, kb.idx(epoch));
  Value first = kb.eq(kb.rem(i, kb.idx(epoch)), kb.idx(0));
  kb.when(kb.andi(kb.andi(pacing, first), kb.lt(kb.idx(lag), e)), [&] {
    Value want = kb.indexToI32(kb.mul(kb.mul(kb.sub(e, kb.idx(lag)), kb.idx(epoch)), peers));
    Value got = kb.counterWaitUntil(counter, want, 20000);
    kb.when(arith::XOrIOp::create(kb.b, kb.loc, got, kb.boolean(true)),
            [&] { LLVM::StoreOp::create(kb.b, kb.loc, kb.i32(0), flag); });
  });
}

void WavePacer::after(Value i) {
  Value last = kb.eq(kb.rem(kb.add(i, kb.idx(1)), kb.idx(epoch)), kb.idx(0));
  kb.when(on ? kb.andi(on, last) : last, [&] { kb.counterAdd(counter, kb.i32(epoch)); });
}

void WavePacer::clear(KernelBuilder &kb, Value counters, int64_t waves,
                      int64_t threads) {
  kb.loop(kb.threadId(), kb.idx(waves), kb.idx(threads),
          [&](Value w) { kb.store(kb.f32(0.0), counters, w); });
}

void WavePacer::finish(Value per, Value count) {
  auto add = [&] {
    Value added = kb.mul(kb.div(count, kb.idx(epoch)), kb.idx(epoch));
    kb.counterAdd(counter, kb.indexToI32(kb.sub(per, added)));
  };
  if (on)
    kb.when(on, add);
  else
    add();
}
