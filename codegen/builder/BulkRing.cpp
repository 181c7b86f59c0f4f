//===- BulkRing.cpp - shared-memory stages filled by bulk copies ----------===//
//
// The hand-over both staged projection kernels use: thread 0 is the
// producer (bulk copies completing on a full mbarrier), every warp a
// consumer (an arrival on the empty mbarrier when done).
//
//===----------------------------------------------------------------------===//

#include "builder/BulkRing.h"

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
      kb.mbarrierInit(full(kb.idx(s)), fullArrivals);
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
