//===- Project.cpp - h = (x w) phi^T, ms = mean(x^2), gradient ------------===//
//
// The projection is a skinny GEMM, [M, K] x [K, N] with K = n*C large and
// N = 2n + n^2 small, fused with the sum of squares. It reads xvec in memory
// order, so one kernel serves both layouts (phi's columns follow xvec).
//
// Forward: tensor cores, mma.sync m16n8k8 tf32. A warp owns 32 tokens (two
// m-tiles) and walks a range of 8s-wide K chunks. The contraction index is
// permuted inside each chunk so that every lane reads 2s *contiguous* x
// elements per row (16- or 32-byte loads) and the matching phi columns: lane
// (g, t) holds logical k = t and t + 4 of k-step q at physical k = t*2s + 2q
// and t*2s + 2q + 1, for A and B alike. bf16/f16 x is exact in tf32; without
// the op's tf32 flag, phi (and f32 x) are split into a round-to-nearest tf32
// high part and the rest and multiplied in two or three mma's, and each
// chunk's mma sum is added into an fp32 total with ordinary adds: fp32
// accuracy. Split-K over S ranges of chunks (S a function of M) writes
// fixed-order partials [S, M, N + 1] that a second launch sums in order.
//
// Backward: one fused pass over x, on tensor cores too. A block of four
// warps owns 4 x 16T columns of K and a fixed share of the tokens; a warp
// walks its share 8 tokens at a time and computes, per 16-column k-tile,
//   D^T = phi^T gh^T   (16 k x 8 tokens; contraction over N), and
//   gphi^T += x^T gh   (16 k x 8 rows of N; contraction over the 8 tokens).
// D^T's accumulator layout (lane (g, t): rows g, g + 8, tokens 2t, 2t + 1)
// is exactly the A-fragment layout of x^T once the step's tokens are
// permuted (logical t, t + 4 -> physical 2t, 2t + 1), so each lane loads x
// once, as 2T contiguous columns per token (rows g and g + 8 of tile kt are
// columns 2kt and 2kt + 1 of the lane's run), and uses the same values for
// gx = D w + (2/K) gms x, gw += x D and gphi's mma. phi^T's fragments are
// constant and wait in lane-private shared memory. x and gh arrive through
// a ring of stages in shared memory, several steps ahead: for 2-byte x on
// sm_90 a block ring filled by bulk copies (one thread, mbarriers; on sm_90a
// without a weight a producer warp's, which holds the blocks of a wave
// together), else a ring per warp filled by cp.async; the block ring spares
// the L2 every warp asking for the same gh rows (docs/design/project.md).
// Without the tf32 flag, gh and phi are split into tf32 hi + lo parts
// (3xTF32) and gphi's mma accumulators are flushed into fp32 totals every
// 64 tokens. Per-share partials [shares, N*K + K] are summed in order by a
// second launch: deterministic, no atomics.
//
//===----------------------------------------------------------------------===//

#include "builder/BulkRing.h"
#include "builder/Streams.h"
#include "builder/WavePacer.h"
#include "kernels/Kernels.h"
#include "kernels/project/Fragments.h"
#include "kernels/project/Project.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include <numeric>
#include <optional>

using namespace mlir;
using namespace mlir::mhc;
using ::mhc::BufferRole;
using ::mhc::DType;

static void buildReduce(KernelContext &ctx);
ProjectSplitK mlir::mhc::projectSplitK(KernelBuilder &kb, LaunchBuilder &l,
                                       int64_t chunks) {
  ProjectSplitK sk;
  sk.M = l.tokens();
  sk.S = l.splits();
  Value tid = kb.threadId(), bid = kb.blockId();
  sk.lane = kb.rem(tid, kb.idx(32));
  sk.warp = kb.div(tid, kb.idx(32));
  sk.g = kb.div(sk.lane, kb.idx(4));
  sk.t = kb.rem(sk.lane, kb.idx(4));
  sk.mBlock = kb.div(bid, sk.S);
  sk.split = kb.rem(bid, sk.S);
  sk.cBegin = kb.div(kb.mul(sk.split, kb.idx(chunks)), sk.S);
  sk.cEnd = kb.div(kb.mul(kb.add(sk.split, kb.idx(1)), kb.idx(chunks)), sk.S);
  return sk;
}

void mlir::mhc::storeProjectPartials(
    KernelBuilder &kb, const ProjectSplitK &sk, Value partials, Value row,
    Value ms, int64_t N, int64_t nTiles,
    function_ref<Value(int64_t, int64_t)> acc) {
  for (int offset : {1, 2}) {
    auto sh = gpu::ShuffleOp::create(kb.b, kb.loc, ms, offset, 32,
                                     gpu::ShuffleMode::XOR);
    ms = kb.add(ms, sh.getShuffleResult());
  }
  Value base = kb.mul(kb.add(kb.mul(sk.split, sk.M), row), kb.idx(N + 1));
  kb.when(kb.lt(row, sk.M), [&] {
    kb.when(kb.eq(sk.t, kb.idx(0)),
            [&] { kb.store(ms, partials, kb.add(base, kb.idx(N))); });
    for (int64_t nt = 0; nt < nTiles; ++nt)
      for (int64_t e = 0; e < 2; ++e) {
        Value col = kb.add(kb.idx(nt * 8 + e), kb.mul(sk.t, kb.idx(2)));
        Value val = acc(nt, e);
        kb.when(kb.lt(col, kb.idx(N)),
                [&] { kb.store(val, partials, kb.add(base, col)); });
      }
  });
}

void mlir::mhc::declareProjectForwardIO(KernelContext &ctx) {
  const ::mhc::KernelSpec &spec = ctx.spec;
  int64_t N = ctx.N(), K = ctx.K();
  ctx.buffer("x", spec.act, BufferRole::Input, {K, 0});
  ctx.buffer("phi", spec.param, BufferRole::Input, {0, N * K});
  if (spec.hasWeight)
    ctx.buffer("weight", spec.param, BufferRole::Input, {0, K});
  ctx.buffer("h", DType::F32, BufferRole::Output, {N, 0});
  ctx.buffer("ms", DType::F32, BufferRole::Output, {1, 0});
}

LogicalResult mlir::mhc::buildProjectForwardPartials(KernelContext &ctx) {
  if (projectForwardIsStaged(ctx))
    return buildProjectForwardStaged(ctx);
  const ::mhc::KernelSpec &spec = ctx.spec;
  int64_t N = ctx.N(), K = ctx.K();
  // Chunk = 8s columns, s k-steps: the largest s in {8, 4, 2, 1} with
  // K % 8s == 0 (unsupportedReason guarantees K % 8 == 0).
  int64_t s = 8;
  while (K % (8 * s) != 0)
    s /= 2;
  int64_t nTiles = (N + 7) / 8;
  bool precise = !spec.tf32;
  // Registers per lane: accumulators (twice in precise mode), the B values
  // of a chunk and the x values. Large n (many n-tiles) takes one m-tile per
  // warp and narrower chunks.
  int64_t mTiles = 2;
  auto regs = [&](int64_t mt, int64_t ss) {
    return mt * nTiles * 4 * (precise ? 2 : 1) + nTiles * 2 * ss + mt * 4 * ss;
  };
  if (regs(mTiles, 1) > 160)
    mTiles = 1;
  while (s > 1 && regs(mTiles, s) > 160)
    s /= 2;
  int64_t chunkK = 8 * s, chunks = K / chunkK;
  const int warps = 4, threads = 32 * warps;
  int64_t tokensPerBlock = warps * mTiles * 16;
  bool splitX = precise && spec.act == DType::F32;

  ctx.manifest.split = {tokensPerBlock, ctx.persistentBlocks(),
                        std::min<int64_t>(64, chunks)};
  declareProjectForwardIO(ctx);
  ctx.buffer("partials", DType::F32, BufferRole::Workspace, {0, 0, N + 1});

  {
    LaunchBuilder &l = ctx.launch("partial");
    l.param("x").param("phi");
    if (spec.hasWeight)
      l.param("weight");
    l.param("partials").param("M").param("S").block(threads)
        .grid({tokensPerBlock, 0, /*timesSplit=*/true});
    KernelBuilder kb = ctx.begin(l);
    ProjectSplitK sk = projectSplitK(kb, l, chunks);
    Value M = sk.M, warp = sk.warp, g = sk.g, t = sk.t, mBlock = sk.mBlock;
    Value cBegin = sk.cBegin, cEnd = sk.cEnd;
    Value lastRow = kb.sub(M, kb.idx(1));

    // rows[mt][0/1]: tokens g and g + 8 of m-tile mt; clamped for loads.
    SmallVector<std::array<Value, 2>> rows, rowOff;
    for (int64_t mt = 0; mt < mTiles; ++mt) {
      Value base = kb.add(kb.mul(mBlock, kb.idx(tokensPerBlock)),
                          kb.add(kb.mul(warp, kb.idx(mTiles * 16)),
                                 kb.idx(mt * 16)));
      std::array<Value, 2> r = {kb.add(base, g),
                                kb.add(base, kb.add(g, kb.idx(8)))};
      rows.push_back(r);
      rowOff.push_back({kb.mul(kb.min(r[0], lastRow), kb.idx(K)),
                        kb.mul(kb.min(r[1], lastRow), kb.idx(K))});
    }
    SmallVector<Value> phiRowOff;
    SmallVector<Value> phiValid;
    for (int64_t nt = 0; nt < nTiles; ++nt) {
      Value row = kb.add(kb.idx(nt * 8), g);
      phiValid.push_back(kb.lt(row, kb.idx(N)));
      phiRowOff.push_back(kb.mul(kb.min(row, kb.idx(N - 1)), kb.idx(K)));
    }

    Value zero = kb.f32(0.0);
    Value zeroAcc = arith::ConstantOp::create(
        kb.b, kb.loc,
        DenseElementsAttr::get(VectorType::get({2, 2}, kb.b.getF32Type()),
                               0.0f));
    SmallVector<Value> init;
    for (int64_t i = 0; i < mTiles * nTiles; ++i)
      init.push_back(zeroAcc);
    for (int64_t i = 0; i < mTiles * 2; ++i)
      init.push_back(zero);
    SmallVector<Value> result = kb.loop(
        cBegin, cEnd, kb.idx(1), init, [&](Value c, ValueRange it) {
          SmallVector<Value> next(it.begin(), it.end());
          Value k0 = kb.add(kb.mul(c, kb.idx(chunkK)), kb.mul(t, kb.idx(2 * s)));
          // B: phi * weight at this lane's 2s columns, per n-tile.
          SmallVector<Value> w;
          if (spec.hasWeight)
            w = loadRun(kb, l.arg("weight"), k0, 2 * s);
          SmallVector<SmallVector<Value>> bv(nTiles);
          for (int64_t nt = 0; nt < nTiles; ++nt) {
            bv[nt] = loadRun(kb, l.arg("phi"), kb.add(phiRowOff[nt], k0), 2 * s);
            for (int64_t e = 0; e < 2 * s; ++e) {
              if (spec.hasWeight)
                bv[nt][e] = kb.mul(bv[nt][e], w[e]);
              bv[nt][e] = kb.select(phiValid[nt], bv[nt][e], zero);
            }
          }
          // In precise mode the tensor core accumulates one chunk only; the
          // chunk sums are added into the totals with IEEE fp32 adds, so its
          // truncating accumulation never runs over more than 8s columns.
          SmallVector<Value> total;
          if (precise)
            for (int64_t i = 0; i < mTiles * nTiles; ++i) {
              total.push_back(next[i]);
              next[i] = zeroAcc;
            }
          for (int64_t mt = 0; mt < mTiles; ++mt) {
            std::array<SmallVector<Value>, 2> xv;
            for (int h = 0; h < 2; ++h) {
              xv[h] = loadRun(kb, l.arg("x"), kb.add(rowOff[mt][h], k0), 2 * s);
              Value &ms = next[mTiles * nTiles + mt * 2 + h];
              for (Value v : xv[h])
                ms = kb.fma(v, v, ms);
            }
            for (int64_t q = 0; q < s; ++q) {
              SmallVector<Value> a = {xv[0][2 * q], xv[1][2 * q],
                                      xv[0][2 * q + 1], xv[1][2 * q + 1]};
              SmallVector<Value> aHi = a, aLo;
              if (splitX) {
                aHi.clear();
                for (Value v : a) {
                  auto [hi, lo] = splitTf32(kb, v);
                  aHi.push_back(hi);
                  aLo.push_back(lo);
                }
              }
              Value A = fragment(kb, aHi);
              Value ALo = splitX ? fragment(kb, aLo) : Value();
              for (int64_t nt = 0; nt < nTiles; ++nt) {
                Value &acc = next[mt * nTiles + nt];
                Value b0 = bv[nt][2 * q], b1 = bv[nt][2 * q + 1];
                if (!precise) {
                  acc = mma(kb, A, fragment(kb, {b0, b1}), acc);
                  continue;
                }
                auto [h0, l0] = splitTf32(kb, b0);
                auto [h1, l1] = splitTf32(kb, b1);
                Value BHi = fragment(kb, {h0, h1});
                acc = mma(kb, A, BHi, acc);
                acc = mma(kb, A, fragment(kb, {l0, l1}), acc);
                if (splitX)
                  acc = mma(kb, ALo, BHi, acc);
              }
            }
          }
          if (precise)
            for (int64_t i = 0; i < mTiles * nTiles; ++i)
              next[i] = kb.add(total[i], next[i]);
          return next;
        });

    for (int64_t mt = 0; mt < mTiles; ++mt)
      for (int h = 0; h < 2; ++h)
        storeProjectPartials(
            kb, sk, l.arg("partials"), rows[mt][h],
            result[mTiles * nTiles + mt * 2 + h], N, nTiles,
            [&](int64_t nt, int64_t e) -> Value {
              return vector::ExtractOp::create(kb.b, kb.loc,
                                               result[mt * nTiles + nt],
                                               ArrayRef<int64_t>{h, e});
            });
  }
  return success();
}

static LogicalResult buildForward(KernelContext &ctx) {
  if (failed(buildProjectForwardPartials(ctx)))
    return failure();
  buildReduce(ctx);
  return success();
}

/// h and ms from the partials [S, M, N + 1], summed over S in order.
static void buildReduce(KernelContext &ctx) {
  int64_t N = ctx.N(), K = ctx.K();
  {
    // A thread per (token, column): with few tokens S is large (up to 64)
    // and a thread per token would add S * (N + 1) values in sequence.
    const int rthreads = 256;
    int64_t width = N + 1, rows = rthreads / width;
    LaunchBuilder &l = ctx.launch("reduce");
    l.param("partials").param("h").param("ms").param("M").param("S")
        .block(rthreads).grid({rows, 0});
    KernelBuilder kb = ctx.begin(l);
    Value M = l.tokens(), tid = kb.threadId();
    Value m = kb.add(kb.mul(kb.blockId(), kb.idx(rows)), kb.div(tid, kb.idx(width)));
    Value col = kb.rem(tid, kb.idx(width));
    kb.when(kb.andi(kb.lt(tid, kb.idx(rows * width)), kb.lt(m, M)), [&] {
      Value item = kb.add(kb.mul(m, kb.idx(width)), col);
      Value stride = kb.mul(M, kb.idx(width));
      SmallVector<Value> sum = kb.loop(
          kb.idx(0), l.splits(), kb.idx(1), ValueRange{kb.f32(0.0)},
          [&](Value sp, ValueRange it) -> SmallVector<Value> {
            Value v = kb.load(l.arg("partials"), kb.add(kb.mul(sp, stride), item));
            return {kb.add(it[0], v)};
          });
      Value isMs = kb.eq(col, kb.idx(N));
      kb.when(isMs, [&] {
        kb.store(kb.div(sum[0], kb.f32(static_cast<double>(K))), l.arg("ms"), m);
      });
      kb.when(kb.lt(col, kb.idx(N)), [&] {
        kb.store(sum[0], l.arg("h"), kb.add(kb.mul(m, kb.idx(N)), col));
      });
    });
  }
}

static LogicalResult buildBackward(KernelContext &ctx) {
  if (projectBackwardIsWide(ctx))
    return buildProjectBackwardWide(ctx);
  if (projectBackwardIsWgmma(ctx))
    return buildProjectBackwardWgmma(ctx);
  const ::mhc::KernelSpec &spec = ctx.spec;
  int64_t N = ctx.N(), K = ctx.K();
  bool hasW = spec.hasWeight;
  bool precise = !spec.tf32;
  bool splitX = precise && spec.act == DType::F32;
  bool roundX = !precise && spec.act == DType::F32;
  int64_t rSteps = (N + 7) / 8, parts = precise ? 2 : 1;
  // T k-tiles (16 columns each) per warp: as many as keep gphi's mma
  // accumulators (twice that with precise mode's fp32 totals) near 48
  // registers. T = 4 gives each lane 8 contiguous columns: 16-byte loads.
  int64_t T = 4;
  while (T > 1 && T * rSteps * 4 * parts > 48)
    T /= 2;
  // Four warps per block and three blocks per SM; large n in precise mode
  // (n = 8: 80 accumulators) takes two warps and two blocks so that the
  // registers suffice.
  bool large = T * rSteps * 4 * parts > 48;
  int warps = large ? 2 : 4, blocksPerSM = large ? 2 : 3;
  // For 2-byte activations on sm_90 (with gh rows whole 16-byte pieces,
  // N % 4 == 0) the stage is the block's: see `staged` below.
  int64_t actBytes = ::mhc::byteWidth(spec.act);
  bool staged = actBytes == 2 && spec.arch != "sm_80" && N % 4 == 0;
  // Where that leaves one k-tile per warp with tf32 (n = 8: ten row steps)
  // the warp's step is bound by shared-memory loads, one gh fragment per
  // mma: two k-tiles per warp share each (80 accumulators). Four warps per
  // block, three per SM, each stage's gh then serving 128 columns instead
  // of 64 (every block reads all of gh from the L2); the shapes measured
  // are in docs/design/project.md.
  if (staged && T == 1 && !precise) {
    T = 2;
    warps = 4;
    blocksPerSM = 3;
  }
  // `paced` staged specs add a producer warp (see "Producer" below): on
  // sm_90a, those whose consumers fit the 136 registers of 160-thread
  // blocks at three per SM without spilling (no weight).
  bool paced = staged && !hasW && spec.arch == "sm_90a";
  const int threads = 32 * (warps + (paced ? 1 : 0));
  int64_t laneCols = 2 * T, blockCols = warps * 16 * T;
  int64_t slices = (K + blockCols - 1) / blockCols;
  int64_t width = N * K + (hasW ? K : 0); // gphi, then gw
  // Token shares: a constant of the spec, so gphi's partial sums have the
  // same order on every run. Blocks do equal work, so the grid should fill
  // its last wave of resident blocks; more shares cost a larger final sum.
  // Both are weighed for M = 32768 tokens.
  int64_t shares = tokenShares(double(ctx.smCount() * blocksPerSM), slices,
                               2.0 * 32768 * K * actBytes, width);
  // Steps (8 tokens each) per run of the two-level sums (precise mode).
  const int64_t run = 8;

  // Each warp streams its steps through a private ring of `depth` stages in
  // shared memory, filled by cp.async (no registers held by loads in
  // flight). A stage: x as [token 2t + u][copy c][lane] of `unit` bytes (a
  // lane reads back exactly what it copied; consecutive lanes, consecutive
  // 16 bytes: no bank conflicts), the step's gh rows [8, N] (read by every
  // lane: a warp sync after the wait), and gms of the 8 tokens. Tokens past
  // M and columns past K are zero-filled by the copies themselves.
  int64_t laneBytes = laneCols * actBytes;
  int64_t unit = std::min<int64_t>(16, laneBytes), copies = laneBytes / unit;
  int64_t xFloats = 2 * 32 * laneBytes / 4;
  int64_t ghFloats = (8 * N + 3) / 4 * 4, ghPieces = 2 * N; // 16-byte pieces
  int64_t stageFloats = xFloats + ghFloats + 8;
  int64_t phiFloats = warps * T * rSteps * parts * 128;
  int64_t budget = LaunchBuilder::sharedLimit(spec.arch) * 228 / 227 / blocksPerSM - 1024;
  // A power of two (the stage of a step is a mask of it), at most 8.
  int64_t depth = 2;
  while (depth < 8 && (2 * depth * warps * stageFloats + phiFloats) * 4 <= budget)
    depth *= 2;
  // For `staged` specs the stage is the block's instead: one thread fills
  // it with bulk copies (the TMA engine: no per-lane copy instructions), x
  // as the block's 8 rows of blockCols columns (rows padded by 16 bytes, so
  // that the lanes reading one 16-byte column of different rows hit
  // different banks) and gh once for all warps; full/empty mbarriers hand
  // stages between that thread and the warps, as in
  // ForwardStaged.cpp (paced specs: a producer warp's thread).
  int64_t rowBytes = blockCols * actBytes + 16;
  // gh's row stride in the stage. With 2N % 32 == 0 (n = 6, 8) the lanes'
  // reads of D's B (row g, column t) and of gphi's B (row 2t + u, column g)
  // are 4-way bank conflicts, which bound n = 8: the block ring then copies
  // gh row by row into rows of S = 4 (mod 8) floats, 32 banks apart.
  // Otherwise one copy (n = 4's 2-way conflicts cost less than per-row
  // copies).
  int64_t ghStride = N;
  if (staged) {
    if (2 * N % 32 == 0)
      ghStride = N + (12 - N % 8) % 8;
    xFloats = 8 * rowBytes / 4;
    ghFloats = 8 * ghStride;
    stageFloats = xFloats + ghFloats;
    // Four stages: deeper rings measured no faster.
    depth = 4;
  }

  ctx.buffer("gh", DType::F32, BufferRole::Input, {N, 0});
  ctx.buffer("gms", DType::F32, BufferRole::Input, {1, 0});
  ctx.buffer("x", spec.act, BufferRole::Input, {K, 0});
  ctx.buffer("phi", spec.param, BufferRole::Input, {0, N * K});
  if (hasW)
    ctx.buffer("weight", spec.param, BufferRole::Input, {0, K});
  ctx.buffer("gx", spec.act, BufferRole::Output, {K, 0});
  ctx.buffer("gphi", spec.param, BufferRole::Output, {0, N * K});
  if (hasW)
    ctx.buffer("gweight", spec.param, BufferRole::Output, {0, K});
  ctx.buffer("partials", DType::F32, BufferRole::Workspace, {0, shares * width});
  // The paced producers' counters (below): an i32 per wave of resident
  // blocks, counting issued steps in epochs of kEpoch.
  const int64_t waveBlocks = ctx.smCount() * blocksPerSM;
  const int64_t waves = (slices * shares + waveBlocks - 1) / waveBlocks;
  constexpr int64_t kEpoch = 3, kPaceLag = 1;
  // Pacing needs blocks that live for several epochs: from 8 per share
  // (M >= 1152 at six shares). Below that the zero launch is skipped (one
  // launch fewer for a small call) and the counters are left alone.
  const int64_t paceTokens = 8 * 8 * kEpoch * shares;
  if (paced) {
    ctx.buffer("progress", DType::F32, BufferRole::Workspace, {0, waves});
    LaunchBuilder &l = ctx.launch("zero");
    ::mhc::GridRule grid{0, 1};
    grid.minTokens = paceTokens;
    l.param("progress").block(32).grid(grid);
    KernelBuilder kb = ctx.begin(l);
    WavePacer::clear(kb, l.arg("progress"), waves, 32);
  }

  {
    LaunchBuilder &l = ctx.launch("main");
    l.param("gh").param("gms").param("x").param("phi");
    if (hasW)
      l.param("weight");
    l.param("gx").param("partials");
    if (paced)
      l.param("progress");
    l.param("M").block(threads)
        .grid({0, slices * shares})
        .sharedF32(phiFloats)
        .sharedF32((staged ? 1 : warps) * depth * stageFloats, /*align=*/128)
        .minBlocksPerSM(blocksPerSM);
    if (staged) // the mbarriers (and the paced producer's flag)
      l.sharedI64(2 * depth + (paced ? 1 : 0));
    KernelBuilder kb = ctx.begin(l);
    Value M = l.tokens();
    Value tid = kb.threadId(), bid = kb.blockId();
    Value lane = kb.rem(tid, kb.idx(32)), warp = kb.div(tid, kb.idx(32));
    Value g = kb.div(lane, kb.idx(4)), t = kb.rem(lane, kb.idx(4));
    Value slice = kb.rem(bid, kb.idx(slices)), share = kb.div(bid, kb.idx(slices));
    // This lane's run of 2T physical columns; logical row g + 8h of k-tile
    // kt is column colBase + 2kt + h.
    Value colBase = kb.add(kb.mul(slice, kb.idx(blockCols)),
                           kb.add(kb.mul(warp, kb.idx(16 * T)),
                                  kb.mul(g, kb.idx(laneCols))));
    Value active = kb.lt(colBase, kb.idx(K));
    Value col0 = kb.select(active, colBase, kb.idx(0));
    Value zero = kb.f32(0.0);
    Value smem = l.shared(0), ring = l.shared(1);
    auto slot = [&](int64_t kt, int64_t rs, int64_t part) {
      Value s = kb.add(kb.mul(warp, kb.idx(T * rSteps * parts)),
                       kb.idx((kt * rSteps + rs) * parts + part));
      return kb.add(kb.mul(s, kb.idx(128)), kb.mul(lane, kb.idx(4)));
    };

    // phi^T's A fragments (rows 8rs + t and 8rs + t + 4 at this lane's
    // columns), tf32-rounded or split, parked in lane-private shared memory
    // slots: they are reused every step but would cost T*rSteps*4 registers.
    auto parkPhi = [&] {
      for (int64_t rs = 0; rs < rSteps; ++rs) {
        std::array<SmallVector<Value>, 2> rowVals;
        for (int h = 0; h < 2; ++h) {
          Value r = kb.add(kb.idx(8 * rs + 4 * h), t);
          Value ok = kb.andi(active, kb.lt(r, kb.idx(N)));
          Value off = kb.add(kb.mul(kb.min(r, kb.idx(N - 1)), kb.idx(K)), col0);
          for (Value v : loadRun(kb, l.arg("phi"), off, laneCols))
            rowVals[h].push_back(kb.select(ok, v, zero));
        }
        for (int64_t kt = 0; kt < T; ++kt) {
          SmallVector<Value> a = {rowVals[0][2 * kt], rowVals[0][2 * kt + 1],
                                  rowVals[1][2 * kt], rowVals[1][2 * kt + 1]};
          auto [hi, lo] = tf32Parts(kb, a, precise);
          for (int64_t i = 0; i < 4; ++i) {
            kb.store(hi[i], smem, kb.add(slot(kt, rs, 0), kb.idx(i)));
            if (precise)
              kb.store(lo[i], smem, kb.add(slot(kt, rs, 1), kb.idx(i)));
          }
        }
      }
    };
    // (Scalar accesses: the backend merges them into ld.shared.v4.)
    auto aFragment = [&](int64_t kt, int64_t rs, int64_t part) {
      Value base = slot(kt, rs, part);
      SmallVector<Value> v;
      for (int64_t i = 0; i < 4; ++i)
        v.push_back(kb.load(smem, kb.add(base, kb.idx(i))));
      return fragment(kb, v);
    };
    SmallVector<Value> w; // the consumers' weights of this lane's columns
    Value twoOverK = kb.f32(2.0 / static_cast<double>(K));

    // This share's steps of 8 tokens.
    Value steps = kb.div(kb.add(M, kb.idx(7)), kb.idx(8));
    Value per = kb.div(kb.add(steps, kb.idx(shares - 1)), kb.idx(shares));
    Value sBegin = kb.min(kb.mul(share, per), steps);
    Value sEnd = kb.min(kb.add(sBegin, per), steps);
    Value lastRow = kb.sub(M, kb.idx(1));

    Value zeroAcc = arith::ConstantOp::create(
        kb.b, kb.loc,
        DenseElementsAttr::get(VectorType::get({2, 2}, kb.b.getF32Type()),
                               0.0f));
    // Iteration values: gphi's accumulators [kt][rs] (16 columns x 8 rows
    // each), then gw's sums of this lane's columns.
    int64_t nAcc = T * rSteps;
    SmallVector<Value> init(nAcc, zeroAcc);
    init.append(laneCols, zero);

    Value warpRing = kb.mul(warp, kb.idx(depth * stageFloats));
    auto stageBase = [&](Value step) {
      Value stage = arith::AndIOp::create(kb.b, kb.loc, step, kb.idx(depth - 1));
      return kb.add(warpRing, kb.mul(stage, kb.idx(stageFloats)));
    };
    auto xSlot = [&](Value base, int64_t u, int64_t c) {
      return kb.add(base, kb.add(kb.idx((u * copies + c) * 32 * unit / 4),
                                 kb.mul(lane, kb.idx(unit / 4))));
    };
    // i32 byte count of a 16-byte piece of a [.., 4k floats] buffer that
    // starts at float `src` of `end` floats: 16, the rest, or 0.
    auto pieceBytes = [&](Value src, Value end) {
      Value left = kb.sub(kb.max(end, src), src);
      Value bytes = kb.mul(kb.min(left, kb.idx(4)), kb.idx(4));
      return kb.indexToI32(bytes);
    };
    Value ghEnd = kb.mul(M, kb.idx(N));
    // Issues the copies of `step` into its stage (no commit), for any step:
    // every source clamped, bytes past M zero-filled.
    auto issuePartialStep = [&](Value step) {
      Value base = stageBase(step);
      Value m0 = kb.mul(step, kb.idx(8));
      for (int u = 0; u < 2; ++u) {
        Value tok = kb.add(m0, kb.add(kb.mul(t, kb.idx(2)), kb.idx(u)));
        Value ok = kb.andi(active, kb.lt(tok, M));
        Value bytes = kb.select(ok, kb.i32(unit), kb.i32(0));
        Value off = kb.add(kb.mul(kb.min(tok, lastRow), kb.idx(K)), col0);
        for (int64_t c = 0; c < copies; ++c)
          kb.copyAsync(kb.sharedPtr(ring, xSlot(base, u, c)),
                       kb.globalPtr(l.arg("x"), kb.add(off, kb.idx(c * unit / actBytes))),
                       unit, bytes);
      }
      Value ghBase = kb.add(base, kb.idx(xFloats));
      for (int64_t i = 0; i < (ghPieces + 31) / 32; ++i) {
        Value p = kb.add(lane, kb.idx(32 * i));
        auto copy = [&] {
          Value src = kb.add(kb.mul(m0, kb.idx(N)), kb.mul(p, kb.idx(4)));
          Value bytes = pieceBytes(src, ghEnd);
          kb.copyAsync(kb.sharedPtr(ring, kb.add(ghBase, kb.mul(p, kb.idx(4)))),
                       kb.globalPtr(l.arg("gh"), kb.select(kb.lt(src, ghEnd), src, kb.idx(0))),
                       16, bytes);
        };
        if (32 * i + 32 <= ghPieces)
          copy();
        else
          kb.when(kb.lt(p, kb.idx(ghPieces)), copy);
      }
      kb.when(kb.lt(lane, kb.idx(2)), [&] {
        Value src = kb.add(m0, kb.mul(lane, kb.idx(4)));
        kb.copyAsync(kb.sharedPtr(ring, kb.add(ghBase, kb.add(kb.idx(ghFloats), kb.mul(lane, kb.idx(4))))),
                     kb.globalPtr(l.arg("gms"), kb.select(kb.lt(src, M), src, kb.idx(0))),
                     16, pieceBytes(src, M));
      });
    };
    // The same for a step of 8 tokens below M (all but the last): the
    // lane's sources are fixed offsets from the step's first token, and
    // whole pieces are copied (columns past K only when K % blockCols).
    Value xLane = kb.add(kb.mul(kb.mul(t, kb.idx(2)), kb.idx(K)), col0);
    Value xBytes = K % blockCols == 0 ? Value() : kb.select(active, kb.i32(unit), kb.i32(0));
    auto issueFullStep = [&](Value step) {
      Value base = stageBase(step);
      Value m0 = kb.mul(step, kb.idx(8));
      Value off = kb.add(kb.mul(m0, kb.idx(K)), xLane);
      for (int u = 0; u < 2; ++u)
        for (int64_t c = 0; c < copies; ++c)
          kb.copyAsync(kb.sharedPtr(ring, xSlot(base, u, c)),
                       kb.globalPtr(l.arg("x"), kb.add(off, kb.idx(u * K + c * unit / actBytes))),
                       unit, xBytes);
      Value ghBase = kb.add(base, kb.idx(xFloats));
      Value ghSrc = kb.add(kb.mul(m0, kb.idx(N)), kb.mul(lane, kb.idx(4)));
      Value ghDst = kb.add(ghBase, kb.mul(lane, kb.idx(4)));
      for (int64_t i = 0; i < (ghPieces + 31) / 32; ++i) {
        auto copy = [&] {
          kb.copyAsync(kb.sharedPtr(ring, kb.add(ghDst, kb.idx(128 * i))),
                       kb.globalPtr(l.arg("gh"), kb.add(ghSrc, kb.idx(128 * i))), 16);
        };
        if (32 * i + 32 <= ghPieces)
          copy();
        else
          kb.when(kb.lt(lane, kb.idx(ghPieces - 32 * i)), copy);
      }
      kb.when(kb.lt(lane, kb.idx(2)), [&] {
        kb.copyAsync(kb.sharedPtr(ring, kb.add(ghDst, kb.idx(ghFloats))),
                     kb.globalPtr(l.arg("gms"), kb.add(m0, kb.mul(lane, kb.idx(4)))), 16);
      });
    };
    auto issueStep = [&](Value step) {
      Value full = kb.lt(kb.add(kb.mul(step, kb.idx(8)), kb.idx(7)), M);
      Value notFull = arith::XOrIOp::create(kb.b, kb.loc, full, kb.boolean(true));
      kb.when(full, [&] { issueFullStep(step); });
      kb.when(notFull, [&] { issuePartialStep(step); });
    };
    Type actVec = VectorType::get({unit / actBytes}, elementType(kb.b.getContext(), spec.act));

    // The block's ring (staged): stage i % depth holds step sBegin + i; every
    // consumer lane releases its own reads (BulkRing::release).
    std::optional<BulkRing> bulk;
    if (staged)
      bulk.emplace(kb, l.shared(2), depth, warps, /*everyLane=*/true);
    Value count = kb.sub(sEnd, sBegin);
    // Bytes of this block's slice of a row (the last slice may be narrower).
    Value sliceCol = kb.mul(slice, kb.idx(blockCols));
    Value xRowBytes = kb.mul(kb.min(kb.sub(kb.idx(K), sliceCol), kb.idx(blockCols)),
                             kb.idx(actBytes));
    // The producer (thread 0, or the paced producer warp's lane 0): the
    // copies of step sBegin + i into stage st. Rows past M repeat row M - 1
    // (their gh rows are zero, so they add nothing); gh's rows past M are
    // not copied but zeroed.
    auto issueBlockStep = [&](Value i, Value st) {
      Value base = kb.mul(st, kb.idx(stageFloats));
      Value m0 = kb.mul(kb.add(sBegin, i), kb.idx(8));
      Value rows = kb.min(kb.sub(M, m0), kb.idx(8));
      Value ghBase = kb.add(base, kb.idx(xFloats));
      kb.loop(kb.mul(rows, kb.idx(ghStride)), kb.idx(ghFloats), kb.idx(1), [&](Value e) {
        kb.store(zero, ring, kb.add(ghBase, e));
      });
      Value ghBytes = kb.mul(rows, kb.idx(N * 4));
      Value bar = bulk->full(st);
      kb.mbarrierArriveExpectTx(bar, kb.indexToI32(kb.add(kb.mul(xRowBytes, kb.idx(8)), ghBytes)));
      for (int64_t r = 0; r < 8; ++r) {
        Value row = kb.min(kb.add(m0, kb.idx(r)), lastRow);
        kb.bulkCopy(kb.sharedPtr(ring, kb.add(base, kb.idx(r * rowBytes / 4))),
                    kb.globalPtr(l.arg("x"), kb.add(kb.mul(row, kb.idx(K)), sliceCol)),
                    kb.indexToI32(xRowBytes), bar);
      }
      if (ghStride == N)
        kb.bulkCopy(kb.sharedPtr(ring, ghBase),
                    kb.globalPtr(l.arg("gh"), kb.mul(m0, kb.idx(N))), kb.indexToI32(ghBytes), bar);
      else
        for (int64_t r = 0; r < 8; ++r)
          kb.when(kb.lt(kb.idx(r), rows), [&] {
            kb.bulkCopy(kb.sharedPtr(ring, kb.add(ghBase, kb.idx(r * ghStride))),
                        kb.globalPtr(l.arg("gh"), kb.mul(kb.add(m0, kb.idx(r)), kb.idx(N))),
                        kb.i32(N * 4), bar);
          });
    };
    // This lane's x columns within the block's slice.
    Value laneColInBlock = kb.sub(colBase, sliceCol);

    auto stepBody = [&](Value step, SmallVector<Value> &acc) {
      Value m0 = kb.mul(step, kb.idx(8));
      Value base, i;
      std::array<Value, 2> gmsRaw;
      if (staged) {
        // gms straight from global memory (two values per lane, in L1).
        for (int u = 0; u < 2; ++u)
          gmsRaw[u] = kb.load(l.arg("gms"),
                              kb.min(kb.add(m0, kb.add(kb.mul(t, kb.idx(2)), kb.idx(u))), lastRow));
        i = kb.sub(step, sBegin);
        base = kb.mul(paced ? bulk->wait(i) : bulk->acquire(i, count, issueBlockStep),
                      kb.idx(stageFloats));
      } else {
        // Step + depth - 1 goes in flight, then this step's copies (the
        // oldest group but depth - 1) are waited for.
        Value ahead = kb.add(step, kb.idx(depth - 1));
        kb.when(kb.lt(ahead, sEnd), [&] { issueStep(ahead); });
        kb.copyAsyncCommit();
        kb.copyAsyncWait(depth - 1);
        kb.syncWarp();
        base = stageBase(step);
      }
      // Tokens 2t + u (x, gx, gphi's B) and g (D's B).
      std::array<Value, 2> tok, tokOk;
      std::array<SmallVector<Value>, 2> xa;
      std::array<Value, 2> gms;
      for (int u = 0; u < 2; ++u) {
        tok[u] = kb.add(m0, kb.add(kb.mul(t, kb.idx(2)), kb.idx(u)));
        tokOk[u] = kb.lt(tok[u], M);
        for (int64_t c = 0; c < copies; ++c) {
          Value at = staged ? kb.add(base, kb.div(kb.add(kb.idx(u * rowBytes + c * unit),
                                                          kb.add(kb.mul(t, kb.idx(2 * rowBytes)),
                                                                 kb.mul(laneColInBlock, kb.idx(actBytes)))),
                                                   kb.idx(4)))
                            : xSlot(base, u, c);
          Value raw = LLVM::LoadOp::create(kb.b, kb.loc, actVec, kb.sharedPtr(ring, at), unit);
          Value v = kb.toF32(raw);
          for (int64_t i = 0; i < unit / actBytes; ++i)
            xa[u].push_back(kb.extract(v, i));
        }
      }
      Value ghBase = kb.add(base, kb.idx(xFloats));
      for (int u = 0; u < 2; ++u)
        gms[u] = kb.mul(staged ? gmsRaw[u]
                               : kb.load(ring, kb.add(ghBase, kb.add(kb.idx(ghFloats + u),
                                                                     kb.mul(t, kb.idx(2))))),
                        twoOverK);
      // gh[m0 + tokLocal][8rs + i]; rows past N are zero. (Row stride
      // ghStride: at most 2-way bank conflicts.)
      auto ghAt = [&](Value tokLocal, int64_t rs, Value i) {
        Value r = kb.add(kb.idx(8 * rs), i);
        Value v = kb.load(ring, kb.add(ghBase, kb.add(kb.mul(tokLocal, kb.idx(ghStride)), r)));
        return 8 * rs + 8 <= N ? v : kb.select(kb.lt(r, kb.idx(N)), v, zero);
      };
      // x's A fragments per k-tile (exact in tf32 for bf16/f16).
      SmallVector<Value> ax, axLo;
      for (int64_t kt = 0; kt < T; ++kt) {
        SmallVector<Value> a = {xa[0][2 * kt], xa[0][2 * kt + 1],
                                xa[1][2 * kt], xa[1][2 * kt + 1]};
        if (splitX || roundX) {
          auto [hi, lo] = tf32Parts(kb, a, splitX);
          a = hi;
          if (splitX)
            axLo.push_back(fragment(kb, lo));
        }
        ax.push_back(fragment(kb, a));
      }
      SmallVector<Value> d(T, zeroAcc);
      for (int64_t rs = 0; rs < rSteps; ++rs) {
        // D^T += phi^T gh^T: B = gh[m0 + g][8rs + t (+4)].
        Value bd0 = ghAt(g, rs, t);
        Value bd1 = ghAt(g, rs, kb.add(t, kb.idx(4)));
        // gphi^T += x^T gh with the step's tokens permuted (logical t and
        // t + 4 are physical 2t and 2t + 1): B = gh[m0 + 2t + u][8rs + g].
        Value bg0 = ghAt(kb.mul(t, kb.idx(2)), rs, g);
        Value bg1 = ghAt(kb.add(kb.mul(t, kb.idx(2)), kb.idx(1)), rs, g);
        auto [bdH, bdL] = tf32Parts(kb, {bd0, bd1}, precise);
        auto [bgH, bgL] = tf32Parts(kb, {bg0, bg1}, precise);
        Value bdHi = fragment(kb, bdH), bgHi = fragment(kb, bgH);
        Value bdLo = precise ? fragment(kb, bdL) : Value();
        Value bgLo = precise ? fragment(kb, bgL) : Value();
        for (int64_t kt = 0; kt < T; ++kt) {
          Value aHi = aFragment(kt, rs, 0);
          d[kt] = mma(kb, aHi, bdHi, d[kt]);
          if (precise) {
            d[kt] = mma(kb, aFragment(kt, rs, 1), bdHi, d[kt]);
            d[kt] = mma(kb, aHi, bdLo, d[kt]);
          }
          Value &gp = acc[kt * rSteps + rs];
          gp = mma(kb, ax[kt], bgHi, gp);
          if (precise)
            gp = mma(kb, ax[kt], bgLo, gp);
          if (splitX)
            gp = mma(kb, axLo[kt], bgHi, gp);
        }
      }
      // Every lane is done with the stage before it is refilled.
      if (staged)
        bulk->release(i, lane);
      else
        kb.syncWarp();
      // D[m0 + 2t + u][column 2kt + h] is d[kt][h][u]: gx, and gw's sums.
      std::array<SmallVector<Value>, 2> gx;
      for (int u = 0; u < 2; ++u)
        for (int64_t j = 0; j < laneCols; ++j) {
          Value dv = vector::ExtractOp::create(
              kb.b, kb.loc, d[j / 2], ArrayRef<int64_t>{j % 2, u});
          // (Without a weight, D w is D: one fma.)
          gx[u].push_back(hasW ? kb.fma(dv, w[j], kb.mul(gms[u], xa[u][j]))
                               : kb.fma(gms[u], xa[u][j], dv));
          acc[nAcc + j] = kb.fma(xa[u][j], dv, acc[nAcc + j]);
        }
      for (int u = 0; u < 2; ++u)
        kb.when(kb.andi(active, tokOk[u]), [&] {
          kb.storeFrom(gx[u], l.arg("gx"),
                       kb.add(kb.mul(tok[u], kb.idx(K)), col0));
        });
    };

    // Precise mode sums in two levels: runs of `run` steps, then the runs;
    // gphi's mma accumulators restart every run and are added into fp32
    // totals, so the tensor core's truncating accumulation never spans more
    // than 64 tokens. With tf32 (bound 2e-3) one level is enough.
    int64_t nSums = nAcc + laneCols;
    auto steps1 = [&](Value lb, Value ub, ValueRange start) {
      return kb.loop(lb, ub, kb.idx(1), start, [&](Value step, ValueRange it) {
        SmallVector<Value> sums(it.begin(), it.end());
        stepBody(step, sums);
        return sums;
      });
    };
    // The consumers: every warp but the producer's.
    auto consume = [&] {
      parkPhi();
      w.assign(laneCols, kb.f32(1.0));
      if (hasW)
        w = loadRun(kb, l.arg("weight"), col0, laneCols);
      // The first depth - 1 steps go in flight (a group per warp, or bulk
      // copies by thread 0 after the mbarriers are set up).
      if (staged && !paced) {
        bulk->start(count, issueBlockStep);
      } else if (!staged) {
        for (int64_t d = 0; d + 1 < depth; ++d) {
          Value step = kb.add(sBegin, kb.idx(d));
          kb.when(kb.lt(step, sEnd), [&] { issueStep(step); });
          kb.copyAsyncCommit();
        }
      }
      SmallVector<Value> total;
      if (!precise) {
        total = steps1(sBegin, sEnd, init);
      } else {
        total = kb.loop(
            sBegin, sEnd, kb.idx(run), init, [&](Value s0, ValueRange outer) {
              SmallVector<Value> start(init.begin(), init.end());
              SmallVector<Value> sums =
                  steps1(s0, kb.min(kb.add(s0, kb.idx(run)), sEnd), start);
              for (int64_t i = 0; i < nSums; ++i)
                sums[i] = kb.add(outer[i], sums[i]);
              return sums;
            });
      }
      // Groups of steps past the share's end were empty.
      if (!staged)
        kb.copyAsyncWait(0);

      // gw: the four lanes of a column group hold different tokens.
      SmallVector<Value> gw;
      for (int64_t j = 0; j < laneCols; ++j) {
        Value v = total[nAcc + j];
        for (int offset : {1, 2}) {
          auto sh = gpu::ShuffleOp::create(kb.b, kb.loc, v, offset, 32,
                                           gpu::ShuffleMode::XOR);
          v = kb.add(v, sh.getShuffleResult());
        }
        gw.push_back(v);
      }
      kb.when(active, [&] {
        Value base = kb.mul(share, kb.idx(width));
        // gphi[8rs + 2t + e][colBase + 2kt + h] = acc[kt][rs][h][e] * w.
        for (int64_t rs = 0; rs < rSteps; ++rs)
          for (int64_t e = 0; e < 2; ++e) {
            Value r = kb.add(kb.idx(8 * rs + e), kb.mul(t, kb.idx(2)));
            SmallVector<Value> vals;
            for (int64_t j = 0; j < laneCols; ++j)
              vals.push_back(kb.mul(
                  w[j], vector::ExtractOp::create(
                            kb.b, kb.loc, total[(j / 2) * rSteps + rs],
                            ArrayRef<int64_t>{j % 2, e})));
            kb.when(kb.lt(r, kb.idx(N)), [&] {
              kb.storeFrom(vals, l.arg("partials"),
                           kb.add(base, kb.add(kb.mul(r, kb.idx(K)), col0)));
            });
          }
        if (hasW)
          kb.when(kb.eq(t, kb.idx(0)), [&] {
            kb.storeFrom(gw, l.arg("partials"),
                         kb.add(base, kb.add(kb.idx(N * K), col0)));
          });
      });
    };

    if (!paced) {
      consume();
    } else {
      // Producer: lane 0 of warp `warps` fills the ring, so that no
      // consumer waits while it paces (WavePacer): the blocks of a wave
      // (smCount() * blocksPerSM consecutive block ids) in epochs of
      // kEpoch steps, on counters that launch "zero" clears; pacing keeps
      // a wave's blocks reading nearby x (docs/design/project.md).
      bulk->init();
      kb.when(kb.eq(tid, kb.idx(32 * warps)), [&] {
        Value wave = kb.div(bid, kb.idx(waveBlocks));
        Value peers = kb.min(kb.idx(waveBlocks),
                             kb.sub(kb.idx(slices * shares), kb.mul(wave, kb.idx(waveBlocks))));
        Value counter = kb.globalPtr(l.arg("progress"), wave);
        Value flag = kb.sharedPtr(l.shared(2), kb.idx(2 * depth));
        Value pace = arith::XOrIOp::create(kb.b, kb.loc, kb.lt(M, kb.idx(paceTokens)),
                                           kb.boolean(true));
        WavePacer pacer(kb, counter, flag, peers, kEpoch, kPaceLag, pace);
        kb.loop(kb.idx(0), count, kb.idx(1), [&](Value i) {
          pacer.before(i);
          bulk->produce(i, [&](Value st) { issueBlockStep(i, st); });
          pacer.after(i);
        });
        pacer.finish(per, count);
      });
      kb.when(kb.lt(warp, kb.idx(warps)), consume);
    }
  }
  SmallVector<std::pair<std::string, int64_t>> dsts = {{"gphi", N * K}};
  if (hasW)
    dsts.push_back({"gweight", K});
  emitColumnSumFinal(ctx, "partials", width, dsts, shares);
  return success();
}

LogicalResult mlir::mhc::buildProject(KernelContext &ctx) {
  return ctx.spec.dir == ::mhc::Direction::Forward ? buildForward(ctx)
                                                   : buildBackward(ctx);
}
