//===- Rings.h - shared-memory copy rings -----------------------*- C++ -*-===//
//
// Rings of shared-memory stages filled by bulk copies (BulkRing, TokenRing)
// and the pacing of a wave of producers (WavePacer).
//
//===----------------------------------------------------------------------===//

#ifndef MHC_CODEGEN_BUILDER_RINGS_H
#define MHC_CODEGEN_BUILDER_RINGS_H

#include "builder/KernelContext.h"

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

/// A launch with a block of eight warps per token whose warps take the
/// token's pieces of channels in turn, each through its own ring of
/// shared-memory stages filled by lane 0's bulk copies (TokenRing.cpp):
/// the backward of aggregate and expand_combine, n = 8's expand_combine
/// forward. Sources are buffers laid out [M, C, values[s]] of the 2-byte
/// activation type.
struct TokenRing {
  static constexpr int64_t kWarps = 8;
  /// n = 4 or 8, 2-byte activations, layout (C, n), sm_90+, C % 32 == 0.
  static bool serves(const KernelContext &ctx);
  TokenRing(const KernelContext &ctx, ArrayRef<int64_t> values);
  /// Block, grid, blocks per SM and the launch's shared buffers: 0 the
  /// blockSum scratch of `reduced` values, 1 the stages, 2 the mbarriers.
  void configure(LaunchBuilder &l, int64_t reduced) const;
  /// Sets up the barriers and puts this warp's first pieces in flight.
  void start(KernelBuilder &kb, LaunchBuilder &l, ArrayRef<Value> srcs);
  /// This warp's channels in order: body(channel, vals, acc) with vals[s]
  /// source s's values at the channel as f32; acc starts as `init` and is
  /// returned after the warp's last piece.
  SmallVector<Value>
  loop(KernelBuilder &kb, LaunchBuilder &l, ArrayRef<Value> srcs, Type act,
       ValueRange init,
       function_ref<void(Value, ArrayRef<SmallVector<Value>>, SmallVector<Value> &)>
           body) const;
  /// The block's token (after start).
  Value token;

private:
  Value stageOf(KernelBuilder &kb, Value k) const;
  Value firstChannel(KernelBuilder &kb, Value k) const;
  void issue(KernelBuilder &kb, LaunchBuilder &l, ArrayRef<Value> srcs, Value k) const;
  int64_t C, ch = 0, depth = 0, pieces = 0, stageBytes = 0;
  SmallVector<int64_t> values, offsets;
  Value lane, warp, count;
};

} // namespace mlir::mhc

#endif // MHC_CODEGEN_BUILDER_RINGS_H
