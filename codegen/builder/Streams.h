//===- Streams.h - n-stream loads, loops and sums ---------------*- C++ -*-===//
//
// Helpers shared by the element-wise families: loading and storing a token's
// n streams in either layout, the streaming launch shape, block sums and the
// deterministic column sum over tokens.
//
//===----------------------------------------------------------------------===//

#ifndef MHC_CODEGEN_BUILDER_STREAMS_H
#define MHC_CODEGEN_BUILDER_STREAMS_H

#include "builder/KernelContext.h"

namespace mlir::mhc {

/// The residual streams of one token over channels [c0, c0 + w): values[i][e]
/// is stream i, channel c0 + e, as f32. Handles both layouts.
SmallVector<SmallVector<Value>> loadStreams(KernelBuilder &kb,
                                            const KernelContext &ctx, Value x,
                                            Value m, Value c0, int64_t w);
void storeStreams(KernelBuilder &kb, const KernelContext &ctx, Value out,
                  Value m, Value c0, ArrayRef<SmallVector<Value>> values);

/// expand_combine's output stream j at one channel (docs/MATH.md):
/// post_j fb + sum_i P_ij x(i), as post_j * fb, then one fma per i in order
/// (fb = f + bias, P row-major). The seam's fused partial computes x_next
/// with it too, so both give the same bits.
Value combineStream(KernelBuilder &kb, int64_t n, int64_t j,
                    ArrayRef<Value> post, ArrayRef<Value> P, Value fb,
                    function_ref<Value(int64_t)> x);

/// expand_combine's gradient at one element, given gout's g(j), x's x(i)
/// and fb = f (+ bias): appends gf = sum_j post_j g_j and gx_i = sum_j
/// P_ij g_j, and adds f g_j and x_i g_j to the token's sums (gpost, then gP
/// row-major). post(j) and P(i n + j) are asked for where they are used,
/// P row by row. The seam's fused backward runs it too: the same bits.
void expandCombineGradElement(KernelBuilder &kb, int64_t n,
                              function_ref<Value(int64_t)> post,
                              function_ref<Value(int64_t)> P,
                              function_ref<Value(int64_t)> g,
                              function_ref<Value(int64_t)> x, Value f,
                              SmallVector<Value> &gf,
                              SmallVector<SmallVector<Value>> &gx,
                              MutableArrayRef<Value> sums);

/// The backward's "acc" input when spec.readsAcc() (aggregate, project and
/// expand_combine): x's gradient from its other users, x's shape, in
/// spec.accType() (TE's f32 buffer with acc=f32), which the kernel adds to
/// its own gx where gx is stored. Each family declares it right after its
/// inputs.
void declareAcc(KernelContext &ctx);
/// gx = own + acc as the unfused `own.add(acc)` gives it (docs/MATH.md,
/// "acc"): own (f32) rounded to the activation dtype first when that has 2
/// bytes, then one f32 add (add.rn: never contracted with own's last
/// product). With acc=f32 (TE's f32 buffer) own is not rounded: the sum is
/// f32's. `own` and `acc` are f32; the store rounds the sum.
Value plusAcc(KernelBuilder &kb, const ::mhc::KernelSpec &spec, Value own, Value acc);

/// `count` consecutive f32 values of row `row` (at row * count), in the
/// widest accesses the row's alignment allows (16 bytes when count % 4 == 0).
SmallVector<Value> loadRow(KernelBuilder &kb, Value mem, Value row,
                           int64_t count);

/// The streaming launch shape of the elementwise forwards: the M * chunks
/// items (a token's w-wide channel chunks, in memory order) are cut into
/// blocks of threads * perThread consecutive items; thread t of a block takes
/// items t + u * threads (u < perThread), so every warp access covers
/// consecutive chunks. perThread is a power of two <= 4 with at most 256
/// bytes of x and 128 loaded values per thread: more loads in flight per
/// thread, in blocks of consecutive items, bring the streaming forwards to
/// the copy rate (docs/design/streams.md).
/// When chunks divide by the block's items, a block lies in one token and a
/// thread loads the per-token values (pre; post and P) once; otherwise
/// every item loads them. Launches whose loaded values fit in 96 registers
/// ask for 2 blocks per SM (<= 128 registers): without a bound ptxas can
/// pick 64 registers and spill.
struct StreamShape {
  int64_t chunks = 0;
  int threads = 256;
  int perThread = 1;
  bool tokenPerBlock = false;
  int minBlocks = 0; // for LaunchBuilder::minBlocksPerSM; 0: no bound
  ::mhc::GridRule grid() const;
};
/// `itemValues` / `tokenValues`: f32 values an item / a token holds loaded.
StreamShape streamShape(const KernelContext &ctx, int64_t w,
                        int64_t itemValues, int64_t tokenValues);

/// Runs the stream: a thread issues the loads of all its items,
/// load(m, chunk), and the per-token values, token(m), before any
/// finish(m, chunk, loaded, tokenValues). Full blocks run unguarded (a guard
/// per item lets LLVM sink each item's loads under it, one load at a time);
/// the last block clamps its loads and guards each finish.
void forEachItem(KernelBuilder &kb, LaunchBuilder &l, const StreamShape &shape,
                 function_ref<SmallVector<Value>(Value, Value)> load,
                 function_ref<SmallVector<Value>(Value)> token,
                 function_ref<void(Value, Value, ArrayRef<Value>, ArrayRef<Value>)> finish);

/// for (chunk = thread; chunk < chunks; chunk += threads) body(chunk, it),
/// with up to `unroll` bodies per iteration: `unroll` is halved until every
/// thread's chunk count divides by it, so no body needs a guard (noalias
/// buffers let the next chunk's loads start before this chunk's stores).
/// Returns the final iteration values. The backward loops take 2, the
/// forward ones 4: the unroll factors that brought each to the copy rate
/// without spilling (docs/design/streams.md has the shapes and times
/// measured).
SmallVector<Value>
chunkLoop(KernelBuilder &kb, int64_t chunks, int threads, int unroll,
          ValueRange init,
          function_ref<SmallVector<Value>(Value, ValueRange)> body);

/// Sums each of `values` over the threads of the block, in a fixed order;
/// thread v (v < values.size()) gets the total of values[v]. `scratch` needs
/// (threads / 32) * values.size() floats, and values.size() <= threads; the
/// call ends with a barrier, so scratch can be reused after it.
Value blockSum(KernelBuilder &kb, int threads, Value scratch,
               ArrayRef<Value> values);

/// Two launches that sum the rows of `src` ([M, width] f32 or activation
/// dtype) over tokens, deterministically: per-block partials into a
/// workspace, then a fixed-order sum of the partials written, converted, to
/// consecutive column ranges of `dsts` (name, count).
void emitColumnSum(KernelContext &ctx, const std::string &src, int64_t width,
                   ArrayRef<std::pair<std::string, int64_t>> dsts);

/// The second launch alone: sums the `rows` rows of `partials` ([rows,
/// width] f32; rows 0 means persistentBlocks()) in order into `dsts`.
void emitColumnSumFinal(KernelContext &ctx, const std::string &partials,
                        int64_t width,
                        ArrayRef<std::pair<std::string, int64_t>> dsts,
                        int64_t rows = 0);

} // namespace mlir::mhc

#endif // MHC_CODEGEN_BUILDER_STREAMS_H
