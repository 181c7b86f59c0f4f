//===- Fragments.h - shared matrix fragments --------------------*- C++ -*-===//
//
// Helpers the projection's variants share: tf32 and bf16 splits of a value,
// mma.sync fragments, the core-matrix layout of wgmma operands, aligned
// shared buffers, and the token split of a reduction over tokens.
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
/// The bf16 hi and lo parts (bf16Parts) of v0 and v1 as two f32 words,
/// hi's then lo's, the first value in the low half of each.
SmallVector<Value> bf16PartWords(KernelBuilder &kb, Value v0, Value v1);
/// Token shares of a split over tokens with `slices` column blocks: the
/// count that best fills the last wave of `slots` resident blocks for
/// M = 32768 tokens of `mainBytes`, against the final sum's cost (8 bytes
/// per share per element of `width`). A constant of the spec, so partial
/// sums have the same order on every run.
int64_t tokenShares(double slots, int64_t slices, double mainBytes, int64_t width);

/// v rounded to tf32 (10 mantissa bits), to nearest: unbiased, unlike the
/// truncation the tensor core applies to its operands.
Value roundTf32(KernelBuilder &kb, Value v);
/// v = hi + lo with hi the nearest tf32 value and lo the (rounded) rest:
/// hi * b + lo * b carries ~21 bits of v.
std::pair<Value, Value> splitTf32(KernelBuilder &kb, Value v);
/// The tf32 parts of each value: hi (rounded to nearest) and, with `split`,
/// lo (the rounded rest); without it only hi, which the tf32 mode multiplies.
std::pair<SmallVector<Value>, SmallVector<Value>>
tf32Parts(KernelBuilder &kb, ArrayRef<Value> values, bool split);
/// Loads `count` consecutive elements as f32 in accesses of at most 16 bytes.
SmallVector<Value> loadRun(KernelBuilder &kb, Value mem, Value offset,
                           int64_t count);
/// An mma.sync operand fragment (a [k, 1] f32 vector) of `elems`.
Value fragment(KernelBuilder &kb, ArrayRef<Value> elems);
/// d = a b + c on the tensor cores: mma.sync m16n8k8 tf32.
Value mma(KernelBuilder &kb, Value a, Value b, Value c);

} // namespace mlir::mhc

#endif // MHC_CODEGEN_KERNELS_PROJECT_FRAGMENTS_H
