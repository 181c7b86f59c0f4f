//===- TokenRing.h - per-warp rings of a token ------------------*- C++ -*-===//
//
// Per-token kernels whose eight warps each stream their share of the
// token's channels through a ring of shared-memory stages.
//
//===----------------------------------------------------------------------===//

#ifndef MHC_CODEGEN_BUILDER_TOKENRING_H
#define MHC_CODEGEN_BUILDER_TOKENRING_H

#include "builder/KernelContext.h"

namespace mlir::mhc {

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

#endif // MHC_CODEGEN_BUILDER_TOKENRING_H
