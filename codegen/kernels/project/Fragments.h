//===- Fragments.h - shared matrix fragments --------------------*- C++ -*-===//
//
// Helpers the projection's variants share: bf16 splits of a value, the
// core-matrix layout of wgmma operands, aligned shared buffers, and the
// token split of a reduction over tokens.
//
//===----------------------------------------------------------------------===//

#ifndef MHC_CODEGEN_KERNELS_PROJECT_FRAGMENTS_H
#define MHC_CODEGEN_KERNELS_PROJECT_FRAGMENTS_H

#include "builder/KernelBuilder.h"

namespace mlir::mhc {

/// Byte offset of 2-byte element (r, c) in core matrices of 8 rows x 16
/// bytes (8 values of c), 8-row groups rStride apart and 8-value groups
/// cStride apart: wgmma's unswizzled canonical layout.
Value coreMatrixByte(KernelBuilder &kb, Value r, Value c, int64_t rStride, int64_t cStride);
/// The f32 index of the first `align`-byte boundary in shared f32 buffer
/// `mem` (swizzled tiles need 1024-byte alignment that the dynamic shared
/// buffer's start does not promise).
Value alignedFloatIndex(KernelBuilder &kb, Value mem, int64_t align);
/// v (times w when given; 0 where !valid) as P bf16 parts, hi = rn(v),
/// lo = rn(v - hi)[, ...]: two carry 2^-17 of v.
SmallVector<Value> bf16Parts(KernelBuilder &kb, Value v, Value w, Value valid,
                             int64_t P);
/// Token shares of a split over tokens with `slices` column blocks: the
/// count that best fills the last wave of `slots` resident blocks for
/// M = 32768 tokens of `mainBytes`, against the final sum's cost (8 bytes
/// per share per element of `width`). A constant of the spec, so partial
/// sums have the same order on every run.
int64_t tokenShares(double slots, int64_t slices, double mainBytes, int64_t width);

} // namespace mlir::mhc

#endif // MHC_CODEGEN_KERNELS_PROJECT_FRAGMENTS_H
