//===- TensorCoreBuilder.h - wgmma and matrix fragments ---------*- C++ -*-===//
//
// The top layer of KernelBuilder (KernelBuilder.h): warpgroup matrix
// multiply-accumulate (wgmma, sm_90a only), the shared-memory descriptors
// of its operands, and ldmatrix/stmatrix to move mma fragments between
// registers and shared memory.
//
//===----------------------------------------------------------------------===//

#ifndef MHC_CODEGEN_BUILDER_TENSORCOREBUILDER_H
#define MHC_CODEGEN_BUILDER_TENSORCOREBUILDER_H

#include "builder/AsyncCopyBuilder.h"

namespace mlir::mhc {

class TensorCoreBuilder : public AsyncCopyBuilder {
public:
  using AsyncCopyBuilder::AsyncCopyBuilder;

  // Warpgroup matrix multiply-accumulate (wgmma, sm_90a only): four warps
  // issue one asynchronous m64nNk16 product together.
  /// The descriptor of a shared tile in the K-major unswizzled canonical
  /// layout: core matrices of 8 rows x 16 bytes, `lbo` bytes apart along K
  /// and `sbo` bytes apart along M (or N). `elem` indexes `mem`.
  Value wgmmaDescriptor(Value mem, Value elem, int64_t lbo, int64_t sbo);
  /// The same for a 128-byte-swizzled layout (TMA's SWIZZLE_128B): rows of
  /// 128 bytes whose 16-byte pieces are permuted by the row index mod 8;
  /// the tile must start at a 1024-byte boundary of shared memory.
  Value wgmmaDescriptorSwizzled(Value mem, Value elem, int64_t lbo, int64_t sbo);
  /// Orders earlier register writes before the next wgmma's reads.
  void wgmmaFence();
  /// Closes the group of wgmma's issued since the last commit.
  void wgmmaCommit();
  /// Waits until at most `pending` committed groups are in flight.
  void wgmmaWait(int64_t pending);
  /// acc += A B with f32 accumulators, bf16 A from registers (the four
  /// words of the m16n8k16 A fragment of the warp's 16 rows of the 64) and
  /// bf16 B (16 x N, K-major) at `desc`; acc holds N / 2 values per thread
  /// in the m16n8 accumulator layout of each 8-column block.
  void wgmmaBf16(MutableArrayRef<Value> acc, ArrayRef<Value> a, Value desc);
  /// acc += A B, bf16 (m64nNk16), both operands in shared memory at their
  /// descriptors; `transA` / `transB`: A stored M-major, B N-major.
  void wgmmaBf16Shared(MutableArrayRef<Value> acc, Value descA, Value descB,
                       bool transA, bool transB);
  /// The same for f16 operands (K-major both).
  void wgmmaF16Shared(MutableArrayRef<Value> acc, Value descA, Value descB);

  // Fragments between registers and shared memory.
  /// ldmatrix / stmatrix .x4.trans (b16): lanes 8i .. 8i + 7 address the
  /// eight 16-byte rows of matrix i (a shared pointer each); lane (g, t) of
  /// a warp holds, in word i, matrix i's elements (rows 2t, 2t + 1; column
  /// g), the first in the low half: an mma accumulator fragment whose rows
  /// are the matrix's columns.
  SmallVector<Value> ldmatrixX4Trans(Value ptr);
  void stmatrixX4Trans(Value ptr, ArrayRef<Value> words);

private:
  /// acc += A B through inline PTX: `a` is A's register fragment (four
  /// words) or A's descriptor (one i64), `desc` B's descriptor.
  void wgmmaAsync(MutableArrayRef<Value> acc, ArrayRef<Value> a, Value desc,
                  int64_t k, StringRef types, StringRef immediates);
};

} // namespace mlir::mhc

#endif // MHC_CODEGEN_BUILDER_TENSORCOREBUILDER_H
