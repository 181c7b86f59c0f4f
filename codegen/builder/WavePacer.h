//===- WavePacer.h - a wave of producers in lockstep ------------*- C++ -*-===//
//
// Keeps the producers of a wave of resident blocks issuing their rings'
// steps in loose lockstep, through a progress counter in global memory.
//
//===----------------------------------------------------------------------===//

#ifndef MHC_CODEGEN_BUILDER_WAVEPACER_H
#define MHC_CODEGEN_BUILDER_WAVEPACER_H

#include "builder/KernelBuilder.h"

namespace mlir::mhc {

/// The producers of a wave of blocks (consecutive block ids, resident
/// together) issuing their ring's steps in loose lockstep: long-lived
/// blocks that drift apart spread their reads over DRAM (see
/// bench/probes/copy_locality.cu). One producer thread per block calls
/// before(i) and after(i) around step i and finish() at the end. The first
/// step of epoch e (`epoch` steps) waits until every block of the wave has
/// issued epoch e - lag - 1, on an i32 counter of issued steps per wave in
/// global memory that an earlier launch zeroed. The counter is a hint that no
/// result depends on: a wait gives up after 20 us (another part's SM count,
/// other work on the GPU) and that block stops pacing, through a flag (an
/// i32 in shared memory).
struct WavePacer {
  /// `peers`: the blocks of this block's wave; `on` (i1, or null for
  /// always): whether this call paces at all (the counter is untouched if
  /// not).
  WavePacer(KernelBuilder &kb, Value counter, Value flag, Value peers,
            int64_t epoch, int64_t lag, Value on = Value());
  void before(Value i);
  void after(Value i);
  /// Counts the steps of the wave's longest share (`per`) that this block
  /// (`count` steps) did not issue, so that no block waits for them.
  void finish(Value per, Value count);
  /// The earlier launch's part: `threads` threads of one block zero the
  /// `waves` counters (i32, in a buffer declared f32: the same zero bits).
  static void clear(KernelBuilder &kb, Value counters, int64_t waves, int64_t threads);

private:
  KernelBuilder &kb;
  Value counter, flag, peers, on;
  int64_t epoch, lag;
};

} // namespace mlir::mhc

#endif // MHC_CODEGEN_BUILDER_WAVEPACER_H
