//===- SimtBuilder.h - arithmetic, memory, loops, warps ---------*- C++ -*-===//
//
// The bottom layer of KernelBuilder (KernelBuilder.h): what every kernel
// writes on every arch, in upstream dialects (arith, math, memref, vector,
// scf, gpu). Index and float arithmetic dispatch on the operand type, loops
// and branches take lambdas, and the compile-time parts of a spec (n, C,
// vector width) become C++ loops that unroll into the IR. Defined in
// SimtBuilder.cpp (values), SimtMemory.cpp, SimtControl.cpp and
// SimtThreads.cpp.
//
//===----------------------------------------------------------------------===//

#ifndef MHC_CODEGEN_BUILDER_SIMTBUILDER_H
#define MHC_CODEGEN_BUILDER_SIMTBUILDER_H

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"

#include <functional>

namespace mlir::mhc {

class SimtBuilder {
public:
  SimtBuilder(OpBuilder &b, Location loc) : b(b), loc(loc) {}

  OpBuilder &b;
  Location loc;
  /// 16-byte vector stores to global memory go out as st.global.cs
  /// (evict-first): for a stream's output, which nothing here reads back.
  bool streamingStores = false;
  /// The widest access (bytes) vload/vstore may issue to a memref whose
  /// offsets are only that aligned (rows of K = n*C elements with K % 8 !=
  /// 0: limitRowAccesses); wider vectors go out in pieces of this size.
  llvm::DenseMap<Value, int64_t> accessLimit;
  /// body() with every limited memref's accesses up to `bytes` wide: for
  /// accesses whose offsets the caller knows to be that aligned.
  void withAccessLimit(int64_t bytes, function_ref<void()> body);

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
  /// Two bf16 values (f32 ones are rounded to nearest even) as one word,
  /// the first in the low half.
  Value packBf16x2(Value lo, Value hi);

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

  // Pointers, for the NVVM ops that take them.
  /// The address of element `elem` of a shared (workgroup) memref, and of a
  /// global (kernel argument) memref.
  Value sharedPtr(Value mem, Value elem);
  Value globalPtr(Value mem, Value elem);
  /// `ptr` (any address space) advanced by `bytes` (index).
  Value bytePtr(Value ptr, Value bytes);
  /// Asks L1 for the line holding global `ptr` (prefetch.global.L1); the
  /// thread does not wait for it.
  void prefetchL1(Value ptr);

  // Control flow.
  void loop(Value lb, Value ub, Value step, function_ref<void(Value)> body);
  SmallVector<Value>
  loop(Value lb, Value ub, Value step, ValueRange init,
       function_ref<SmallVector<Value>(Value, ValueRange)> body);
  void when(Value cond, function_ref<void()> body);
  /// The f32 sum of load(i) over i in [begin, end), added one by one in i's
  /// order (a plain loop's bits), `inFlight` loads issued before their adds:
  /// a split-K reduce's time is its steps' load latency.
  Value sumInOrder(Value begin, Value end, int64_t inFlight,
                   function_ref<Value(Value)> load);
  /// then() where cond holds, else otherwise(): the values of the branch
  /// taken (the two return values of the same types).
  SmallVector<Value> ifElse(Value cond,
                            function_ref<SmallVector<Value>()> then,
                            function_ref<SmallVector<Value>()> otherwise);
  /// `v` (index) through a mov the optimiser cannot see through: values
  /// derived from it in a loop body stay there instead of being hoisted
  /// into registers live across the loop (wgmma descriptors are cheap to
  /// recompute and many).
  Value opaque(Value v);

  // Threads, blocks and warps.
  Value threadId();
  Value blockId();
  Value gridDim();
  void barrier();
  /// bar.sync `id` (i32), `threads`: a barrier of some warps (id 0 is
  /// barrier()'s).
  void namedBarrier(Value id, int64_t threads);
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
  /// A barrier of all `blocks` blocks of a cooperative launch on the
  /// runtime's sync words (`sync`: i32 [count, generation]): a block's
  /// thread 0 arrives on count; the last arriver resets count to 0 and
  /// bumps the generation, which the others wait on. count is 0 again after
  /// every barrier and the generation may hold anything, so the words need
  /// no reset between launches (docs/design/serve.md). Integer atomics
  /// only; the arrival (atom.acq_rel) and the generation's release and
  /// acquire make the blocks' writes before the barrier visible to every
  /// block after it (no separate fences).
  void gridBarrier(Value sync, int64_t blocks);
  /// Programmatic dependent launch (sm_90+; a launch with
  /// LaunchBuilder::programmaticDependent): waits until the grids this one
  /// depends on have completed and their writes are visible. A no-op when
  /// the launch had no programmatic dependency.
  void waitGridDependency();
  /// Lets the next launch on the stream start (its blocks are scheduled as
  /// SMs free up) once every block of this grid has issued it or exited.
  void launchDependents();

protected:
  /// The address of element `elem` of `mem` in its address space, as an
  /// index.
  Value addressOf(Value mem, Value elem);
  /// Inline PTX with side effects, for instructions the NVVM dialect lacks;
  /// `result` is its type (a struct for several values) or null for none.
  /// Returns the result (null for none).
  Value inlinePtx(Type result, ValueRange operands, StringRef text,
                  StringRef constraints);
};

} // namespace mlir::mhc

#endif // MHC_CODEGEN_BUILDER_SIMTBUILDER_H
