//===- Families.h - per-op-family kernel builders ---------------*- C++ -*-===//
//
// Private to codegen/: each op family (one .cpp file) turns a KernelSpec into
// the buffers and launches of its forward or backward op.
//
//===----------------------------------------------------------------------===//

#ifndef MHC_CODEGEN_FAMILIES_H
#define MHC_CODEGEN_FAMILIES_H

#include "mhc/Codegen/KernelBuilder.h"
#include "mhc/Support/KernelSpec.h"

#include <deque>

namespace mlir::mhc {

struct KernelContext {
  KernelContext(OpBuilder &b, gpu::GPUModuleOp module,
                const ::mhc::KernelSpec &spec, ::mhc::Manifest &manifest)
      : b(b), module(module), spec(spec), manifest(manifest) {}

  OpBuilder &b;
  gpu::GPUModuleOp module;
  const ::mhc::KernelSpec &spec;
  ::mhc::Manifest &manifest;
  std::deque<LaunchBuilder> launches;
  /// LLVM's optimisation level for the module (ptxas -O3 follows either
  /// way). A family lowers it only where a measurement shows the kernel
  /// runs as fast and the cold JIT needs the time.
  unsigned llvmOptLevel = 3;
  /// Whether LLVM's SLP vectorizer runs on the module (it packs f32 pairs
  /// into bf16x2 conversions, and sm_100's f32x2 arithmetic). A family turns
  /// it off only where its PTX is the same without it.
  bool llvmSLP = true;

  int64_t n() const { return spec.n; }
  int64_t C() const { return spec.channels; }
  int64_t K() const { return spec.n * spec.channels; }
  int64_t N() const { return 2 * spec.n + spec.n * spec.n; }
  /// Elements per 16-byte access of the activations, narrowed until it
  /// divides C, so every channel chunk is aligned and no tail is needed.
  int64_t actWidth() const;
  /// Channels per chunk of the stream kernels (loadStreams/storeStreams).
  /// (n, C) layout: actWidth(). (C, n) layout: the channels whose n streams
  /// fill one 16-byte access (8/n for 2-byte types), so that a warp's
  /// accesses are contiguous; actWidth() when n does not divide it.
  int64_t streamWidth() const;
  /// Blocks of a persistent (grid-stride over tokens) launch: fixed per arch
  /// so that cross-token partial sums have the same order on every run.
  int64_t persistentBlocks() const;
  /// The flagship part's SMs (persistentBlocks() / 2): resident blocks per
  /// wave are smCount() * blocks per SM.
  int64_t smCount() const { return persistentBlocks() / 2; }

  void buffer(const std::string &name, ::mhc::DType dtype,
              ::mhc::BufferRole role, ::mhc::Extent elems);
  /// Starts a launch named <kernelName>_<suffix>.
  LaunchBuilder &launch(const std::string &suffix);
  /// Creates the gpu.func of `launch` and returns a builder positioned in it.
  KernelBuilder begin(LaunchBuilder &launch);
  /// Records every launch in the manifest (after all were built).
  void finish();
};

/// The residual streams of one token over channels [c0, c0 + w): values[i][e]
/// is stream i, channel c0 + e, as f32. Handles both layouts.
SmallVector<SmallVector<Value>> loadStreams(KernelBuilder &kb,
                                            const KernelContext &ctx, Value x,
                                            Value m, Value c0, int64_t w);
void storeStreams(KernelBuilder &kb, const KernelContext &ctx, Value out,
                  Value m, Value c0, ArrayRef<SmallVector<Value>> values);

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

/// Scale's per-logit math (docs/MATH.md, scale), shared by the scale kernel
/// and the fused pre step so both give the same bits: r = 1/sqrt(ms +
/// norm_eps); the segment (0 pre, 1 post, 2 res) of logit index k; z =
/// alpha h r + beta; the squash of z for pre (sigmoid + pre_eps) or post
/// (post_mult sigmoid).
Value scaleRsqrt(KernelBuilder &kb, const ::mhc::KernelSpec &spec, Value ms);
Value scaleSegment(KernelBuilder &kb, int64_t n, Value k);
Value scaleLogit(KernelBuilder &kb, Value alpha, Value h, Value r, Value beta);
Value scaleSquash(KernelBuilder &kb, const ::mhc::KernelSpec &spec, Value z,
                  bool pre);
/// One token's forward Sinkhorn (docs/MATH.md, sinkhorn) from its n*n logits
/// (row-major, f32) in one thread; calls store(P) on the path the token
/// takes (the log mode falls back to the log domain when its scaling form
/// leaves the safe range). Shared by the sinkhorn kernel and the pre step.
void emitSinkhornPlan(KernelBuilder &kb, const ::mhc::KernelSpec &spec,
                      ArrayRef<Value> logits,
                      function_ref<void(ArrayRef<Value>)> store);

LogicalResult buildAggregate(KernelContext &ctx);
/// The fused pre step (PreKernels.cpp): the projection's partial launches,
/// then one launch per token for the rest.
LogicalResult buildPre(KernelContext &ctx);
LogicalResult buildExpandCombine(KernelContext &ctx);
LogicalResult buildScale(KernelContext &ctx);
LogicalResult buildSinkhorn(KernelContext &ctx);
LogicalResult buildProject(KernelContext &ctx);
/// The projection forward for bf16 activations (ProjectForwardStaged.cpp):
/// whether it serves the spec, and its buffers, pack and partial launches
/// (the reduce launch is the tf32 kernel's).
bool projectForwardIsStaged(const KernelContext &ctx);
/// The forward's inputs and outputs (x, phi[, weight], h, ms), in order.
void declareProjectForwardIO(KernelContext &ctx);
/// Where a block of a split-K forward partial launch works: lane (g, t) of
/// `warp`, token block mBlock, chunk range [cBegin, cEnd) of split `split`.
struct ProjectSplitK {
  Value M, S, lane, warp, g, t, mBlock, split, cBegin, cEnd;
};
ProjectSplitK projectSplitK(KernelBuilder &kb, LaunchBuilder &l,
                            int64_t chunks);
/// Writes token `row`'s partials of split sk.split into [S, M, N + 1]: the
/// sum of squares `ms` (added over the row group's four lanes first, in a
/// fixed order) and acc(nt, e) at columns nt*8 + 2t + e < N.
void storeProjectPartials(KernelBuilder &kb, const ProjectSplitK &sk,
                          Value partials, Value row, Value ms, int64_t N,
                          int64_t nTiles,
                          function_ref<Value(int64_t, int64_t)> acc);
LogicalResult buildProjectForwardStaged(KernelContext &ctx);
/// The projection forward's launches before its reduce: the buffers, the
/// split rule and the launches that leave per-split partials [S, M, N + 1]
/// in the "partials" workspace (sum over S in order: h, then the sum of
/// squares). Project adds the reduce launch; the fused pre step its tail.
LogicalResult buildProjectForwardPartials(KernelContext &ctx);
/// The n = 6 and 8 projection backward on wgmma (ProjectBackwardWgmma.cpp):
/// whether it serves the spec, and its buffers and launches.
bool projectBackwardIsWgmma(const KernelContext &ctx);
/// Their inputs and outputs: gh, gms, x, phi, gx, gphi (in order).
void declareProjectBackwardTmaIO(KernelContext &ctx);
/// Byte offset of 2-byte element (r, c) in core matrices of 8 rows x 16
/// bytes (8 values of c), 8-row groups rStride apart and 8-value groups
/// cStride apart: wgmma's unswizzled canonical layout.
Value coreMatrixByte(KernelBuilder &kb, Value r, Value c, int64_t rStride, int64_t cStride);
/// The f32 index of the first `align`-byte boundary in shared f32 buffer
/// `mem` (swizzled tiles need 1024-byte alignment that the dynamic shared
/// buffer's start does not promise).
Value alignedFloatIndex(KernelBuilder &kb, Value mem, int64_t align);
LogicalResult buildProjectBackwardWgmma(KernelContext &ctx);
/// The same specs when their columns fit one wave of blocks
/// (ProjectBackwardWide.cpp), which takes precedence.
bool projectBackwardIsWide(const KernelContext &ctx);
LogicalResult buildProjectBackwardWide(KernelContext &ctx);
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

#endif // MHC_CODEGEN_FAMILIES_H
