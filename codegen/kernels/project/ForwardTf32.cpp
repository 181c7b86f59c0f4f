//===- ForwardTf32.cpp - projection forward on tf32 tensor cores ----------===//
//
// h = (x w) phi^T and the sum of squares on tensor cores, mma.sync m16n8k8
// tf32, for every spec the staged variant (ForwardStaged.cpp) does not take.
// A warp owns 32 tokens (two m-tiles) and walks a range of 8s-wide K chunks.
// The contraction index is permuted inside each chunk so that every lane
// reads 2s *contiguous* x elements per row (16- or 32-byte loads) and the
// matching phi columns: lane (g, t) holds logical k = t and t + 4 of k-step
// q at physical k = t*2s + 2q and t*2s + 2q + 1, for A and B alike. bf16/f16
// x is exact in tf32; without the op's tf32 flag, phi (and f32 x) are split
// into a round-to-nearest tf32 high part and the rest and multiplied in two
// or three mma's, and each chunk's mma sum is added into an fp32 total with
// ordinary adds: fp32 accuracy. The partial launch writes the split-K
// partials that Forward.cpp's reduce launch sums.
//
//===----------------------------------------------------------------------===//

#include "kernels/project/Fragments.h"
#include "kernels/project/Project.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include <algorithm>

using namespace mlir;
using namespace mlir::mhc;
using ::mhc::BufferRole;
using ::mhc::DType;

namespace {

constexpr int kWarps = 4;

/// How a spec's tf32 forward is tiled, fixed before anything is emitted.
struct Tf32Plan {
  int64_t N, K;
  int64_t steps;  // k-steps (s) per chunk of 8s columns
  int64_t nTiles; // n-tiles of 8 columns
  int64_t mTiles; // m-tiles of 16 tokens per warp
  bool precise;   // without the tf32 flag: phi split into hi + lo
  bool splitX;    // precise with f32 x: x split too
  bool hasWeight;
  /// Masked k-steps of 8 columns after the last whole chunk (K % 8 != 0:
  /// columns [chunks() * chunkK(), K)), run by the last split.
  int64_t tailSteps = 0;
  /// A tail step's plan: loads column by column, masked at K.
  bool masked = false;
  ::mhc::SplitRule split;
  int64_t chunkK() const { return 8 * steps; }
  int64_t chunks() const { return K / chunkK(); }
  int64_t tokensPerBlock() const { return kWarps * mTiles * 16; }
  int64_t accs() const { return mTiles * nTiles; }
};

Tf32Plan planTf32(const KernelContext &ctx) {
  const ::mhc::KernelSpec &spec = ctx.spec;
  Tf32Plan p;
  p.N = ctx.N();
  p.K = ctx.K();
  // Chunk = 8s columns, s k-steps: the largest s in {8, 4, 2, 1} with
  // K % 8s == 0. Any other K (K % 8 != 0) keeps s = 8 (registers allowing)
  // and ends in masked tail steps; its row accesses are as wide as the
  // rows' alignment allows (limitRowAccesses).
  p.steps = 8;
  while (p.K % 8 == 0 && p.K % (8 * p.steps) != 0)
    p.steps /= 2;
  p.nTiles = (p.N + 7) / 8;
  p.precise = !spec.tf32;
  p.splitX = p.precise && spec.act == DType::F32;
  p.hasWeight = spec.hasWeight;
  // Registers per lane: accumulators (twice in precise mode), the B values
  // of a chunk and the x values. Large n (many n-tiles) takes one m-tile per
  // warp and narrower chunks.
  p.mTiles = 2;
  auto regs = [&](int64_t mt, int64_t ss) {
    return mt * p.nTiles * 4 * (p.precise ? 2 : 1) + p.nTiles * 2 * ss +
           mt * 4 * ss;
  };
  if (regs(p.mTiles, 1) > 160)
    p.mTiles = 1;
  while (p.steps > 1 && regs(p.mTiles, p.steps) > 160)
    p.steps /= 2;
  while (p.steps > 1 && p.chunks() == 0) // K < 64 (and K % 8 != 0)
    p.steps /= 2;
  p.tailSteps = (p.K - p.chunks() * p.chunkK() + 7) / 8;
  // At least one split: K < 8 has no whole chunk, only the tail.
  p.split = {p.tokensPerBlock(), ctx.persistentBlocks(),
             std::clamp<int64_t>(p.chunks(), 1, kMaxForwardSplit)};
  return p;
}

/// What lane (g, t) of the partial launch reads: its split-K range, its
/// tokens and phi's rows.
struct Tf32Lane {
  ProjectSplitK sk;
  /// rows[mt][0/1]: tokens g and g + 8 of m-tile mt; rowOff: their x rows'
  /// offsets, clamped for loads.
  SmallVector<std::array<Value, 2>> rows, rowOff;
  /// Row g of each n-tile of phi: its offset (clamped) and whether it is < N.
  SmallVector<Value> phiRowOff, phiValid;
  /// Whether this block runs the tail steps (the last split).
  Value lastSplit;
};

/// `count` columns of a row from column k0 (at rowOff + k0) as f32: in
/// vector accesses, or for a tail step column by column, 0 past K and in
/// all but the last split.
SmallVector<Value> loadCols(KernelBuilder &kb, const Tf32Plan &p,
                            const Tf32Lane &ln, Value mem, Value rowOff,
                            Value k0, int64_t count) {
  if (!p.masked)
    return loadRun(kb, mem, kb.add(rowOff, k0), count);
  SmallVector<Value> out;
  for (int64_t e = 0; e < count; ++e) {
    Value col = kb.add(k0, kb.idx(e));
    Value ok = kb.andi(ln.lastSplit, kb.lt(col, kb.idx(p.K)));
    Value v = kb.toF32(kb.load(mem, kb.add(rowOff, kb.select(ok, col, kb.idx(0)))));
    out.push_back(kb.select(ok, v, kb.f32(0.0)));
  }
  return out;
}

Tf32Lane locateLane(KernelBuilder &kb, LaunchBuilder &l, const Tf32Plan &p) {
  Tf32Lane ln;
  ln.sk = projectSplitK(kb, l, p.chunks());
  const ProjectSplitK &sk = ln.sk;
  int64_t K = p.K;
  ln.lastSplit = kb.eq(sk.split, kb.sub(sk.S, kb.idx(1)));
  Value lastRow = kb.sub(sk.M, kb.idx(1));
  for (int64_t mt = 0; mt < p.mTiles; ++mt) {
    Value base = kb.add(kb.mul(sk.mBlock, kb.idx(p.tokensPerBlock())),
                        kb.add(kb.mul(sk.warp, kb.idx(p.mTiles * 16)),
                               kb.idx(mt * 16)));
    std::array<Value, 2> r = {kb.add(base, sk.g),
                              kb.add(base, kb.add(sk.g, kb.idx(8)))};
    ln.rows.push_back(r);
    ln.rowOff.push_back({kb.mul(kb.min(r[0], lastRow), kb.idx(K)),
                         kb.mul(kb.min(r[1], lastRow), kb.idx(K))});
  }
  for (int64_t nt = 0; nt < p.nTiles; ++nt) {
    Value row = kb.add(kb.idx(nt * 8), sk.g);
    ln.phiValid.push_back(kb.lt(row, kb.idx(p.N)));
    ln.phiRowOff.push_back(kb.mul(kb.min(row, kb.idx(p.N - 1)), kb.idx(K)));
  }
  return ln;
}

/// B of the chunk for this lane: phi * weight at its 2s columns from k0,
/// per n-tile (0 in rows past N).
SmallVector<SmallVector<Value>> loadChunkB(KernelBuilder &kb, LaunchBuilder &l,
                                           const Tf32Plan &p,
                                           const Tf32Lane &ln, Value k0,
                                           Value zero) {
  int64_t s = p.steps;
  SmallVector<Value> w;
  if (p.hasWeight)
    w = loadCols(kb, p, ln, l.arg("weight"), kb.idx(0), k0, 2 * s);
  SmallVector<SmallVector<Value>> bv(p.nTiles);
  for (int64_t nt = 0; nt < p.nTiles; ++nt) {
    bv[nt] = loadCols(kb, p, ln, l.arg("phi"), ln.phiRowOff[nt], k0, 2 * s);
    for (int64_t e = 0; e < 2 * s; ++e) {
      if (p.hasWeight)
        bv[nt][e] = kb.mul(bv[nt][e], w[e]);
      bv[nt][e] = kb.select(ln.phiValid[nt], bv[nt][e], zero);
    }
  }
  return bv;
}

/// m-tile mt's share of the chunk: its two x rows (their squares added into
/// the rows' sums in `next`) times B, into its accumulators in `next`.
void multiplyMTile(KernelBuilder &kb, LaunchBuilder &l, const Tf32Plan &p,
                   const Tf32Lane &ln, int64_t mt, Value k0,
                   ArrayRef<SmallVector<Value>> bv,
                   MutableArrayRef<Value> next) {
  int64_t s = p.steps, nTiles = p.nTiles;
  std::array<SmallVector<Value>, 2> xv;
  for (int h = 0; h < 2; ++h) {
    xv[h] = loadCols(kb, p, ln, l.arg("x"), ln.rowOff[mt][h], k0, 2 * s);
    Value &ms = next[p.accs() + mt * 2 + h];
    for (Value v : xv[h])
      ms = kb.fma(v, v, ms);
  }
  for (int64_t q = 0; q < s; ++q) {
    SmallVector<Value> a = {xv[0][2 * q], xv[1][2 * q], xv[0][2 * q + 1],
                            xv[1][2 * q + 1]};
    SmallVector<Value> aHi = a, aLo;
    if (p.splitX) {
      aHi.clear();
      for (Value v : a) {
        auto [hi, lo] = splitTf32(kb, v);
        aHi.push_back(hi);
        aLo.push_back(lo);
      }
    }
    Value A = fragment(kb, aHi);
    Value ALo = p.splitX ? fragment(kb, aLo) : Value();
    for (int64_t nt = 0; nt < nTiles; ++nt) {
      Value &acc = next[mt * nTiles + nt];
      Value b0 = bv[nt][2 * q], b1 = bv[nt][2 * q + 1];
      if (!p.precise) {
        acc = mma(kb, A, fragment(kb, {b0, b1}), acc);
        continue;
      }
      auto [h0, l0] = splitTf32(kb, b0);
      auto [h1, l1] = splitTf32(kb, b1);
      Value BHi = fragment(kb, {h0, h1});
      acc = mma(kb, A, BHi, acc);
      acc = mma(kb, A, fragment(kb, {l0, l1}), acc);
      if (p.splitX)
        acc = mma(kb, ALo, BHi, acc);
    }
  }
}

/// One chunk of 8s columns at this lane's k0 into the loop's values `next`.
/// In precise mode the tensor core accumulates one chunk only; the chunk
/// sums are added into the totals with IEEE fp32 adds, so its truncating
/// accumulation never runs over more than 8s columns.
void multiplyChunk(KernelBuilder &kb, LaunchBuilder &l, const Tf32Plan &p,
                   const Tf32Lane &ln, Value k0, Value zeroAcc,
                   MutableArrayRef<Value> next) {
  SmallVector<SmallVector<Value>> bv = loadChunkB(kb, l, p, ln, k0, kb.f32(0.0));
  SmallVector<Value> total;
  if (p.precise)
    for (int64_t i = 0; i < p.accs(); ++i) {
      total.push_back(next[i]);
      next[i] = zeroAcc;
    }
  for (int64_t mt = 0; mt < p.mTiles; ++mt)
    multiplyMTile(kb, l, p, ln, mt, k0, bv, next);
  if (p.precise)
    for (int64_t i = 0; i < p.accs(); ++i)
      next[i] = kb.add(total[i], next[i]);
}

/// The loop over the block's chunks, then the tail steps. Its values: a
/// [2, 2] accumulator per (m-tile, n-tile), then the sums of squares of
/// each m-tile's two rows.
SmallVector<Value> emitKLoop(KernelBuilder &kb, LaunchBuilder &l,
                             const Tf32Plan &p, const Tf32Lane &ln) {
  Value zero = kb.f32(0.0);
  Value zeroAcc = arith::ConstantOp::create(
      kb.b, kb.loc,
      DenseElementsAttr::get(VectorType::get({2, 2}, kb.b.getF32Type()),
                             0.0f));
  SmallVector<Value> init;
  for (int64_t i = 0; i < p.accs(); ++i)
    init.push_back(zeroAcc);
  for (int64_t i = 0; i < p.mTiles * 2; ++i)
    init.push_back(zero);
  SmallVector<Value> result = kb.loop(
      ln.sk.cBegin, ln.sk.cEnd, kb.idx(1), init, [&](Value c, ValueRange it) {
        SmallVector<Value> next(it.begin(), it.end());
        Value k0 = kb.add(kb.mul(c, kb.idx(p.chunkK())),
                          kb.mul(ln.sk.t, kb.idx(2 * p.steps)));
        multiplyChunk(kb, l, p, ln, k0, zeroAcc, next);
        return next;
      });
  // The tail (K % 8 != 0): steps of one k-step each, masked loads; every
  // split runs them (zeros but in the last), so the loop's values need no
  // branch.
  Tf32Plan tail = p;
  tail.steps = 1;
  tail.masked = true;
  for (int64_t i = 0; i < p.tailSteps; ++i) {
    Value k0 = kb.add(kb.idx(p.chunks() * p.chunkK() + 8 * i),
                      kb.mul(ln.sk.t, kb.idx(2)));
    multiplyChunk(kb, l, tail, ln, k0, zeroAcc, result);
  }
  return result;
}

/// Writes each of the lane's rows' partials from the loop's results.
void storeTf32Partials(KernelBuilder &kb, LaunchBuilder &l, const Tf32Plan &p,
                       const Tf32Lane &ln, ArrayRef<Value> result) {
  int64_t nTiles = p.nTiles;
  for (int64_t mt = 0; mt < p.mTiles; ++mt)
    for (int h = 0; h < 2; ++h)
      storeProjectPartials(
          kb, ln.sk, l.arg("partials"), ln.rows[mt][h],
          result[p.accs() + mt * 2 + h], p.N, nTiles,
          [&](int64_t nt, int64_t e) -> Value {
            return vector::ExtractOp::create(kb.b, kb.loc,
                                             result[mt * nTiles + nt],
                                             ArrayRef<int64_t>{h, e});
          });
}

/// The partial launch: a block per (token block, split), reading x and phi
/// (and weight) straight into registers.
void emitTf32Partial(KernelContext &ctx, const Tf32Plan &p) {
  LaunchBuilder &l = ctx.launch("partial");
  l.param("x").param("phi");
  if (p.hasWeight)
    l.param("weight");
  l.param("partials").param("M").param("S").block(32 * kWarps)
      .grid({p.tokensPerBlock(), 0, /*timesSplit=*/true});
  KernelBuilder kb = ctx.begin(l);
  limitRowAccesses(ctx, kb, l, {"x", "phi"});
  Tf32Lane ln = locateLane(kb, l, p);
  SmallVector<Value> result = emitKLoop(kb, l, p, ln);
  storeTf32Partials(kb, l, p, ln, result);
}

} // namespace

LogicalResult mlir::mhc::buildProjectForwardTf32(KernelContext &ctx) {
  Tf32Plan p = planTf32(ctx);
  ctx.manifest.split = p.split;
  declareProjectForwardIO(ctx);
  ctx.buffer("partials", DType::F32, BufferRole::Workspace, {0, 0, p.N + 1});
  emitTf32Partial(ctx, p);
  return success();
}
