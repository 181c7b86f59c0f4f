//===- KernelBuilder.h - terse construction of gpu.func kernels -*- C++ -*-===//
//
// The kernel builders of codegen/ write straight-line SIMT code in upstream
// dialects (arith, math, memref, vector, scf, gpu). KernelBuilder wraps an
// OpBuilder so that code reads like the math: index and float arithmetic
// dispatch on the operand type, loops and branches take lambdas, and the
// compile-time parts of a spec (n, C, vector width) become C++ loops that
// unroll into the IR.
//
// LaunchBuilder declares one kernel launch: its buffers and the token count M
// become the gpu.func's parameters (and the manifest's parameter list), in
// the order they are declared.
//
//===----------------------------------------------------------------------===//

#ifndef MHC_CODEGEN_KERNELBUILDER_H
#define MHC_CODEGEN_KERNELBUILDER_H

#include "mhc/Support/Manifest.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/Builders.h"

#include <functional>
#include <map>

namespace mlir::mhc {

class KernelBuilder {
public:
  KernelBuilder(OpBuilder &b, Location loc) : b(b), loc(loc) {}

  OpBuilder &b;
  Location loc;
  /// 16-byte vector stores to global memory go out as st.global.cs
  /// (evict-first): for a stream's output, which nothing here reads back.
  bool streamingStores = false;

  // Constants.
  Value idx(int64_t v);
  Value i32(int64_t v);
  Value f32(double v);
  Value f64(double v);
  /// A float constant of `like`'s (scalar float) type.
  Value constLike(Value like, double v);
  Value boolean(bool v);

  // Arithmetic on index/integers (unsigned division) or floats.
  Value add(Value a, Value c);
  Value sub(Value a, Value c);
  Value mul(Value a, Value c);
  Value div(Value a, Value c);
  Value rem(Value a, Value c);
  Value min(Value a, Value c);
  Value max(Value a, Value c);
  Value neg(Value a);
  Value fma(Value a, Value c, Value d); // a*c + d, fused
  Value lt(Value a, Value c);           // index: unsigned <, float: ordered <
  Value eq(Value a, Value c);
  Value select(Value cond, Value t, Value f);
  Value andi(Value a, Value c);

  // Math (libdevice-accurate).
  Value exp(Value a);
  Value log(Value a);
  /// 2^a (libdevice: one ex2.approx) and log2(a) (lg2.approx.f32; f32
  /// only): single MUFU instructions, far cheaper than accurate exp/log.
  Value exp2(Value a);
  Value log2(Value a);
  Value sqrt(Value a);
  Value sigmoid(Value a); // 1 / (1 + exp(-a)), in a's type
  /// f32 only, single MUFU instructions (rsqrt.approx, ex2.approx and
  /// rcp.approx, ~2^-22 relative each) for latency-bound kernels whose
  /// bound is 1e-5: 1 / sqrt(a), and 1 / (1 + 2^(-a log2 e)).
  Value rsqrtApprox(Value a);
  Value sigmoidApprox(Value a);

  // Conversions.
  Value toF32(Value a);                 // scalar or vector
  Value toF64(Value a);                 // scalar
  Value toType(Value a, Type elemType); // f32 -> element type (round to nearest even)
  Value indexToI64(Value a);
  Value indexToI32(Value a); // byte counts and parities of NVVM ops
  Value i64ToIndex(Value a);

  // Memory: 1-D memrefs, element offsets.
  Value load(Value mem, Value offset);
  void store(Value v, Value mem, Value offset);
  /// Loads `width` consecutive elements; the access is `width * bytes`
  /// aligned, which the kernel's indexing guarantees.
  Value vload(Value mem, Value offset, int64_t width);
  void vstore(Value vec, Value mem, Value offset);
  /// Loads `width` elements as f32 values.
  SmallVector<Value> loadF32(Value mem, Value offset, int64_t width);
  /// Stores f32 values converted to the memref's element type.
  void storeFrom(ArrayRef<Value> values, Value mem, Value offset);
  Value extract(Value vec, int64_t i);
  Value vector(ArrayRef<Value> elems);

  // Control flow.
  void loop(Value lb, Value ub, Value step, function_ref<void(Value)> body);
  SmallVector<Value>
  loop(Value lb, Value ub, Value step, ValueRange init,
       function_ref<SmallVector<Value>(Value, ValueRange)> body);
  void when(Value cond, function_ref<void()> body);

  // GPU.
  Value threadId();
  Value blockId();
  Value gridDim();
  void barrier();
  /// Butterfly sum over the 32 lanes of a warp; every lane gets the total.
  /// The order of additions is fixed, so the result is deterministic.
  Value warpSum(Value v) {
    laneGroupSum(v, 32);
    return v;
  }
  /// The same in place over each aligned group of `lanes` (a power of two)
  /// lanes, for every value: xor offsets lanes / 2 down to 1, the values in
  /// turn at each offset; f32 or f64 (two 32-bit shuffles).
  void laneGroupSum(MutableArrayRef<Value> values, int lanes);
  /// v from the lane `offset` away (xor) in the warp, for f32 or f64 v.
  Value shuffleXor(Value v, int offset);
  void syncWarp();

  // Asynchronous bulk copies (sm_90): the TMA engine copies global memory
  // into shared memory and signals an mbarrier when the bytes have landed.
  /// The address of element `elem` of a shared (workgroup) memref, and of a
  /// global (kernel argument) memref.
  Value sharedPtr(Value mem, Value elem);
  /// `ptr` (any address space) advanced by `bytes` (index).
  Value bytePtr(Value ptr, Value bytes);
  Value globalPtr(Value mem, Value elem);
  void mbarrierInit(Value bar, int64_t arrivals);
  /// Makes the initialised mbarriers visible to the async proxy.
  void fenceMbarrierInit();
  /// Arrives on `bar` and expects `bytes` more bytes of copies in its phase.
  void mbarrierArriveExpectTx(Value bar, int64_t bytes);
  void mbarrierArriveExpectTx(Value bar, Value bytes); // i32
  void mbarrierArrive(Value bar);
  /// Blocks until the phase of `bar` with the given parity (i32) completed.
  void mbarrierWait(Value bar, Value parity);
  /// Copies `bytes` (a multiple of 16, both addresses 16-byte aligned) from
  /// global `src` to shared `dst`; completes on `bar`.
  void bulkCopy(Value dst, Value src, int64_t bytes, Value bar);
  void bulkCopy(Value dst, Value src, Value bytes, Value bar); // i32
  /// cp.async (sm_80): copies `bytes` (4, 8 or 16; both addresses aligned
  /// to it) from global `src` to shared `dst` without passing through
  /// registers. With `srcBytes` (i32, at most `bytes`) only that many are
  /// read and the rest of `dst` is zero-filled; 0 reads nothing.
  void copyAsync(Value dst, Value src, int64_t bytes, Value srcBytes = Value());
  /// Closes the group of this thread's copies issued since the last commit.
  void copyAsyncCommit();
  /// Waits until at most `pending` of this thread's committed groups are
  /// still in flight (the oldest complete first). Other threads' copies
  /// are visible after a barrier (or a warp sync for the warp's own).
  void copyAsyncWait(int64_t pending);
  /// Orders this thread's earlier shared-memory accesses before later
  /// async-proxy (bulk copy) accesses to the same memory.
  void fenceProxyAsyncShared();

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
  /// ldmatrix / stmatrix .x4.trans (b16): lanes 8i .. 8i + 7 address the
  /// eight 16-byte rows of matrix i (a shared pointer each); lane (g, t) of
  /// a warp holds, in word i, matrix i's elements (rows 2t, 2t + 1; column
  /// g), the first in the low half: an mma accumulator fragment whose rows
  /// are the matrix's columns.
  SmallVector<Value> ldmatrixX4Trans(Value ptr);
  /// `v` (index) through a mov the optimiser cannot see through: values
  /// derived from it in a loop body stay there instead of being hoisted
  /// into registers live across the loop (wgmma descriptors are cheap to
  /// recompute and many).
  Value opaque(Value v);
  void stmatrixX4Trans(Value ptr, ArrayRef<Value> words);

  // TMA tensor copies (sm_90), through a "tmap:" parameter (Manifest.h).
  /// Copies the box at (col, row) (i32 coordinates) into shared memory at
  /// `dst`, completing on the mbarrier `bar`.
  void tensorLoad2d(Value dst, Value map, Value col, Value row, Value bar);
  /// Stores the box at `src` to (col, row); rows past the tensor are dropped.
  /// Committed with bulkCommit(); bulkWait() before `src` is rewritten.
  void tensorStore2d(Value map, Value src, Value col, Value row);
  void bulkCommit();
  /// Waits until at most `pending` bulk groups are in flight (`readOnly`:
  /// until they finished reading their shared memory).
  void bulkWait(int64_t pending, bool readOnly);

  // A progress counter in global memory (an i32 at `ptr`, a global
  // pointer) that blocks of one launch share: a scheduling hint that no
  // result depends on.
  /// red.relaxed.gpu: *ptr += v (i32).
  void counterAdd(Value ptr, Value v);
  /// Waits until *ptr - target >= 0 (signed i32: the counter may wrap), at
  /// most `ns` nanoseconds of the global timer; i1 true if it got there.
  Value counterWaitUntil(Value ptr, Value target, int64_t ns);

  /// setmaxnreg: the warpgroup's registers per thread go down (or up) to
  /// `count`; every warp of the warpgroup executes it.
  void setMaxRegisters(int64_t count, bool increase);
  /// bar.sync `id` (i32), `threads`: a barrier of some warps (id 0 is
  /// barrier()'s).
  void namedBarrier(Value id, int64_t threads);
  /// Two bf16 values (f32 ones are rounded to nearest even) as one word,
  /// the first in the low half.
  Value packBf16x2(Value lo, Value hi);
};

/// One kernel launch under construction.
class LaunchBuilder {
public:
  LaunchBuilder(std::string entry, const ::mhc::Manifest &manifest)
      : entry(std::move(entry)), manifest(manifest) {}

  /// Declares parameters, in order: a buffer of the manifest, or "M".
  LaunchBuilder &param(const std::string &name);
  LaunchBuilder &block(int threads);
  LaunchBuilder &grid(::mhc::GridRule rule);
  /// Asks ptxas to fit `blocks` blocks per SM (it caps registers).
  LaunchBuilder &minBlocksPerSM(int blocks);
  /// A workgroup (shared memory) buffer of `elems` f32 values, aligned to
  /// `align` bytes when given.
  LaunchBuilder &sharedF32(int64_t elems, int64_t align = 0);
  /// A workgroup buffer of `elems` i64 values (mbarriers).
  LaunchBuilder &sharedI64(int64_t elems);
  /// The most shared memory a block may use on the spec's arch; past 48 KB
  /// the buffers become views of dynamic shared memory, which the runtime
  /// opts in to (the manifest's dynamic_shared_bytes).
  static constexpr int64_t kStaticSharedLimit = 48 * 1024;
  static int64_t sharedLimit(const std::string &arch);
  /// Bytes of shared memory the buffers declared so far take.
  int64_t sharedBytes() const;

  /// Creates the gpu.func at the end of `module`, positions `b` in its body
  /// and returns it. Call once, before arg()/shared().
  gpu::GPUFuncOp create(OpBuilder &b, gpu::GPUModuleOp module);

  Value arg(const std::string &name) const;
  /// M and S as index values.
  Value tokens() const { return tokensIndex; }
  Value splits() const { return splitIndex; }
  Value shared(unsigned i = 0) const;

  ::mhc::LaunchDesc describe() const;
  int threads() const { return blockThreads; }

private:
  std::string entry;
  const ::mhc::Manifest &manifest;
  std::vector<std::string> params;
  int blockThreads = 256;
  int minBlocks = 0;
  ::mhc::GridRule gridRule{1, 0};
  struct SharedBuffer {
    int64_t elems;
    bool i64;
    int64_t align;
  };
  SmallVector<SharedBuffer> sharedBuffers;
  /// Views of dynamic shared memory, one per buffer, when sharedBytes()
  /// exceeds kStaticSharedLimit; otherwise workgroup attributions.
  SmallVector<Value> dynamicViews;
  gpu::GPUFuncOp func;
  std::map<std::string, Value> args;
  Value tokensIndex, splitIndex;
};

/// The MLIR element type of a kernel dtype.
Type elementType(MLIRContext *ctx, ::mhc::DType dtype);

} // namespace mlir::mhc

#endif // MHC_CODEGEN_KERNELBUILDER_H
