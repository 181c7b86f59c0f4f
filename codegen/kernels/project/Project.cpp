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
// Backward: Backward.cpp picks a variant; BackwardMma.cpp is the one for
// every n.
//
//===----------------------------------------------------------------------===//

#include "builder/Rings.h"
#include "builder/Streams.h"
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

LogicalResult mlir::mhc::buildProject(KernelContext &ctx) {
  return ctx.spec.dir == ::mhc::Direction::Forward ? buildForward(ctx)
                                                   : buildProjectBackward(ctx);
}
