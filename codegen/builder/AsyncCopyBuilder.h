//===- AsyncCopyBuilder.h - async copies, mbarriers, TMA --------*- C++ -*-===//
//
// The middle layer of KernelBuilder (KernelBuilder.h): copies that move
// global memory into shared memory without passing through registers
// (cp.async on sm_80; bulk copies and TMA tensor copies on sm_90), the
// mbarriers and fences that say when their bytes have landed, and the
// synchronisation of warp-specialised kernels built on them.
//
//===----------------------------------------------------------------------===//

#ifndef MHC_CODEGEN_BUILDER_ASYNCCOPYBUILDER_H
#define MHC_CODEGEN_BUILDER_ASYNCCOPYBUILDER_H

#include "builder/SimtBuilder.h"

namespace mlir::mhc {

class AsyncCopyBuilder : public SimtBuilder {
public:
  using SimtBuilder::SimtBuilder;

  // mbarriers: a shared i64 whose phase completes once its arrivals and
  // expected bytes (of copies completing on it) are in.
  void mbarrierInit(Value bar, int64_t arrivals);
  /// Makes the initialised mbarriers visible to the async proxy.
  void fenceMbarrierInit();
  /// Arrives on `bar` and expects `bytes` more bytes of copies in its phase.
  void mbarrierArriveExpectTx(Value bar, int64_t bytes);
  void mbarrierArriveExpectTx(Value bar, Value bytes); // i32
  void mbarrierArrive(Value bar);
  /// Blocks until the phase of `bar` with the given parity (i32) completed.
  void mbarrierWait(Value bar, Value parity);

  // Bulk copies (sm_90): the TMA engine copies global memory into shared
  // memory and signals an mbarrier when the bytes have landed.
  /// Copies `bytes` (a multiple of 16, both addresses 16-byte aligned) from
  /// global `src` to shared `dst`; completes on `bar`.
  void bulkCopy(Value dst, Value src, int64_t bytes, Value bar);
  void bulkCopy(Value dst, Value src, Value bytes, Value bar); // i32
  /// Orders this thread's earlier shared-memory accesses before later
  /// async-proxy (bulk copy) accesses to the same memory.
  void fenceProxyAsyncShared();

  // TMA tensor copies (sm_90), through a "tmap:" parameter (Manifest.h).
  /// Copies the box at (col, row) (i32 coordinates) into shared memory at
  /// `dst`, completing on the mbarrier `bar`.
  void tensorLoad2d(Value dst, Value map, Value col, Value row, Value bar);
  /// The same through a map in granules ("tmap<R>,<P>,<r>,<W>,<G>:"): the
  /// box from granule `granule` (i32) of row `row`.
  void tensorLoad3d(Value dst, Value map, Value granule, Value row, Value bar);
  /// Stores the box at `src` to (col, row); rows past the tensor are dropped.
  /// Committed with bulkCommit(); bulkWait() before `src` is rewritten.
  void tensorStore2d(Value map, Value src, Value col, Value row);
  void bulkCommit();
  /// Waits until at most `pending` bulk groups are in flight (`readOnly`:
  /// until they finished reading their shared memory).
  void bulkWait(int64_t pending, bool readOnly);

  // cp.async (sm_80), per thread.
  /// Copies `bytes` (4, 8 or 16; both addresses aligned to it) from global
  /// `src` to shared `dst` without passing through registers. With
  /// `srcBytes` (i32, at most `bytes`) only that many are read and the rest
  /// of `dst` is zero-filled; 0 reads nothing.
  void copyAsync(Value dst, Value src, int64_t bytes, Value srcBytes = Value());
  /// Closes the group of this thread's copies issued since the last commit.
  void copyAsyncCommit();
  /// Waits until at most `pending` of this thread's committed groups are
  /// still in flight (the oldest complete first). Other threads' copies
  /// are visible after a barrier (or a warp sync for the warp's own).
  void copyAsyncWait(int64_t pending);
  /// An arrival on the mbarrier `bar` once this thread's earlier cp.async
  /// copies have landed (.noinc: counted in the mbarrier's arrivals).
  void copyAsyncArrive(Value bar);

  // Warp specialisation: producer warps issuing copies for consumer warps.
  /// setmaxnreg: the warpgroup's registers per thread go down (or up) to
  /// `count`; every warp of the warpgroup executes it.
  void setMaxRegisters(int64_t count, bool increase);
  /// A progress counter in global memory (an i32 at `ptr`, a global
  /// pointer) that blocks of one launch share: a scheduling hint that no
  /// result depends on. red.relaxed.gpu: *ptr += v (i32).
  void counterAdd(Value ptr, Value v);
  /// Waits until *ptr - target >= 0 (signed i32: the counter may wrap), at
  /// most `ns` nanoseconds of the global timer; i1 true if it got there.
  Value counterWaitUntil(Value ptr, Value target, int64_t ns);

private:
  void tensorLoad(Value dst, Value map, ValueRange coords, Value bar);
};

} // namespace mlir::mhc

#endif // MHC_CODEGEN_BUILDER_ASYNCCOPYBUILDER_H
