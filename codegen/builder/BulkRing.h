//===- BulkRing.h - stages filled by bulk copies ----------------*- C++ -*-===//
//
// A ring of shared-memory stages that one producer thread fills with bulk
// copies and the block's warps consume, handed over through mbarriers.
//
//===----------------------------------------------------------------------===//

#ifndef MHC_CODEGEN_BUILDER_BULKRING_H
#define MHC_CODEGEN_BUILDER_BULKRING_H

#include "builder/KernelBuilder.h"

namespace mlir::mhc {

/// A ring of `stages` shared-memory buffers that thread 0 fills with bulk
/// copies and `warps` warps read, step i in buffer i % stages: per buffer a
/// "full" mbarrier (thread 0's arrival plus the copies' bytes) and an
/// "empty" one (an arrival per warp, or per lane with `everyLane`; a kernel
/// that arrives on it itself passes its arrivals per step as `warps`).
/// `bars` holds 2 * stages i64.
struct BulkRing {
  KernelBuilder &kb;
  Value bars, leader;
  int64_t stages, warps;
  bool everyLane;
  /// Arrivals that complete a full mbarrier's phase besides the copies'
  /// bytes: thread 0's, plus one per thread whose cp.async copies arrive
  /// on it (copyAsyncArrive) where several threads fill a stage.
  int64_t fullArrivals = 1;

  BulkRing(KernelBuilder &kb, Value bars, int64_t stages, int64_t warps,
           bool everyLane = false);
  Value stage(Value i);
  Value full(Value st);
  Value empty(Value st);
  /// Thread 0 sets up the barriers; then the block synchronises.
  void init();
  /// init(), then thread 0 issues steps 0 .. stages - 2 (of `count`).
  /// issue(i, st) copies step i into
  /// buffer st and arrives on full(st) expecting its bytes.
  void start(Value count, function_ref<void(Value, Value)> issue);
  /// At step i: thread 0 refills the buffer of step i - 1 with step
  /// i + stages - 1 once every warp released it; then every thread waits
  /// for step i's buffer, which it returns.
  Value acquire(Value i, Value count, function_ref<void(Value, Value)> issue);
  /// A warp is done with step i's buffer: a proxy fence orders its lanes'
  /// reads before the bulk copy that overwrites it, then lane 0 arrives
  /// after a warp barrier, or with `everyLane` every lane arrives (each
  /// lane's own release: nothing rests on a warp barrier that ptxas may
  /// drop from a converged warp, which compute-sanitizer's racecheck then
  /// reports as hazards).
  void release(Value i, Value lane);
  /// Warp-specialised use (a producer thread apart from the consumers):
  /// the producer fills step i's buffer once every warp released the
  /// step that used it before; issue(st) copies into buffer st.
  void produce(Value i, function_ref<void(Value)> issue);
  /// A consumer waits for step i's buffer, which it returns.
  Value wait(Value i);

private:
  Value parity(Value i); // of the phase step i completes, as i32
};

} // namespace mlir::mhc

#endif // MHC_CODEGEN_BUILDER_BULKRING_H
