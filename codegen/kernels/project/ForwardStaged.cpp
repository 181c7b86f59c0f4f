//===- ForwardStaged.cpp - projection forward for bf16 activations --------===//
//
// h = (x w) phi^T and the sum of squares for bf16 x, on bf16 tensor cores
// (mma.sync m16n8k16) with phi staged through shared memory by bulk copies.
//
// phi w is split once per call (launch "pack") into P bf16 parts, hi =
// rn(v), lo = rn(v - hi)[, rn(v - hi - lo)]: two parts carry 2^-17 of v
// (finer than tf32's 2^-11) for the tf32 mode, three carry fp32's 24 bits.
// bf16 x times a bf16 part is exact in fp32, so x is never converted: a
// lane's 16-byte x load is two k-steps of its A fragments as they are. The
// parts are written in fragment order: per chunk of 16·SQ columns, per pair
// of k-steps, part and n-tile, 32 lanes x 16 bytes, so that one bulk copy
// moves a chunk's B into shared memory and every B read is a contiguous
// 512-byte warp access.
//
// Partial launch: 8 warps, warp w owns tokens 16w..16w+15 of the block's
// 128 (two m-tiles, 32w..32w+31 of 256, for n >= 6 in the tf32 mode); lane
// (g, t) loads tokens g and g + 8 of an m-tile, 16 bytes at byte 64j + 16t
// of the chunk's run for pair j (a warp access covers 8 rows x 64 bytes). The
// contraction index is permuted inside each 32-column pair: logical k
// {2t, 2t+1, 2t+8, 2t+9} of step 2j+h is physical 32j + 8t + 4h + {0..3},
// for A and B alike. Thread 0 keeps a ring of RST chunk buffers filled: it
// waits until every warp released the buffer (an mbarrier per buffer), then
// issues the next chunk's copy, which completes on the buffer's "full"
// mbarrier. A warp releases a buffer after a proxy fence: without it the
// next copy can overwrite B that slow lanes are still reading. Split-K over
// S ranges of chunks writes the fixed-order partials [S, M, N + 1] that
// Forward.cpp's reduce launch sums.
//
// Faster than the register-fed tf32 variant (ForwardTf32.cpp) at n = 4
// (docs/design/project.md).
//
// Specs with one block per SM (n >= 6 in the tf32 mode) on sm_90a multiply
// with wgmma instead: warpgroup G (warps 4G..4G+3) owns two 64-token
// m-tiles, warp w of it rows 16w..16w+15 of each, whose A fragments are
// the same x words as above. The pack then writes each (k-step, part)
// tile of B as wgmma's K-major core matrices, and the products read B
// from the ring through descriptors; a chunk's products are one group,
// waited for before the warp releases the buffer.
//
//===----------------------------------------------------------------------===//

#include "builder/BulkRing.h"
#include "builder/Streams.h"
#include "kernels/project/ForwardStagedPlan.h"
#include "kernels/project/Fragments.h"
#include "kernels/project/Project.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;
using namespace mlir::mhc;
using ::mhc::BufferRole;
using ::mhc::DType;

namespace {

/// The four 32-bit words of a 16-byte vector (two bf16 each, low half
/// first: the register layout of mma fragments).
SmallVector<Value> words(KernelBuilder &kb, Value v) {
  auto i32x4 = VectorType::get({4}, kb.b.getI32Type());
  Value w = vector::BitCastOp::create(kb.b, kb.loc, i32x4, v);
  SmallVector<Value> out;
  for (int64_t e = 0; e < 4; ++e)
    out.push_back(kb.extract(w, e));
  return out;
}

/// The bf16 values in the low and high halves of a word, as f32.
std::pair<Value, Value> halves(KernelBuilder &kb, Value w) {
  Type f32 = kb.b.getF32Type();
  Value lo = arith::ShLIOp::create(kb.b, kb.loc, w, kb.i32(16));
  Value hi = kb.andi(w, kb.i32(static_cast<int32_t>(0xFFFF0000u)));
  return {arith::BitcastOp::create(kb.b, kb.loc, f32, lo),
          arith::BitcastOp::create(kb.b, kb.loc, f32, hi)};
}

/// c += A B on the tensor cores: m16n8k16, bf16 operands, f32 accumulators.
void mmaBf16(KernelBuilder &kb, ArrayRef<Value> a, ArrayRef<Value> b,
             MutableArrayRef<Value> c) {
  Type f32 = kb.b.getF32Type();
  auto result = LLVM::LLVMStructType::getLiteral(kb.b.getContext(),
                                                 {f32, f32, f32, f32});
  auto op = NVVM::MmaOp::create(
      kb.b, kb.loc, result, a, b, c, ArrayRef<int64_t>{16, 8, 16},
      std::nullopt, std::nullopt,
      std::array<NVVM::MMATypes, 2>{NVVM::MMATypes::bf16, NVVM::MMATypes::bf16},
      std::array<NVVM::MMALayout, 2>{NVVM::MMALayout::row, NVVM::MMALayout::col});
  for (int64_t e = 0; e < 4; ++e)
    c[e] = LLVM::ExtractValueOp::create(kb.b, kb.loc, op.getResult(),
                                        ArrayRef<int64_t>{e});
}

/// The pack launch: one thread per item, body(l, kb, i) emits item i.
void packLaunch(KernelContext &ctx, const StagedPlan &p, int64_t items,
                function_ref<void(LaunchBuilder &, KernelBuilder &, Value)> body) {
  const int pthreads = 256;
  LaunchBuilder &l = ctx.launch("pack");
  l.param("phi");
  if (p.hasWeight)
    l.param("weight");
  ::mhc::GridRule grid{0, (items + pthreads - 1) / pthreads};
  if (p.inlineSplit())
    grid.minTokens = p.tokensPerBlock() + 1;
  l.param("packed").block(pthreads).grid(grid);
  KernelBuilder kb = ctx.begin(l);
  Value i = kb.add(kb.mul(kb.blockId(), kb.idx(pthreads)), kb.threadId());
  kb.when(kb.lt(i, kb.idx(items)), [&] { body(l, kb, i); });
}

/// The mma.sync layout's 16-byte piece (chunk c, pair j, n-tile nt, lane)
/// of every part: parts[p][e], e the piece's 8 columns.
SmallVector<SmallVector<Value>> pieceParts(KernelBuilder &kb,
                                           const StagedPlan &sp, Value phi,
                                           Value weight, Value c, Value j,
                                           Value nt, Value lane) {
  int64_t N = sp.N, K = sp.K, P = sp.parts;
  Value row = kb.add(kb.mul(nt, kb.idx(8)), kb.div(lane, kb.idx(4)));
  Value col = kb.add(kb.add(kb.mul(c, kb.idx(sp.chunk())), kb.mul(j, kb.idx(32))),
                     kb.mul(kb.rem(lane, kb.idx(4)), kb.idx(8)));
  Value valid = kb.lt(row, kb.idx(N));
  SmallVector<Value> v, w;
  if (sp.anyK()) {
    v = loadStagedParams(kb, sp, phi, kb.mul(kb.min(row, kb.idx(N - 1)), kb.idx(K)), col, 8);
    if (sp.hasWeight)
      w = loadStagedParams(kb, sp, weight, kb.idx(0), col, 8);
  } else {
    Value off = kb.add(kb.mul(kb.min(row, kb.idx(N - 1)), kb.idx(K)), col);
    v = kb.loadF32(phi, off, 8);
    if (sp.hasWeight)
      w = kb.loadF32(weight, col, 8);
  }
  SmallVector<SmallVector<Value>> parts(P);
  for (int64_t e = 0; e < 8; ++e) {
    SmallVector<Value> pe = bf16Parts(kb, v[e], sp.hasWeight ? w[e] : Value(), valid, P);
    for (int64_t p = 0; p < P; ++p)
      parts[p].push_back(pe[p]);
  }
  return parts;
}

/// The pack launch for wgmma's B layout: per chunk, k-step s and part p, an
/// [N, 16] tile in core matrices (n-block nb, k-half kb) of 8 rows x 16
/// bytes at byte nb * 256 + kb * 128 (the descriptors' SBO and LBO). Logical
/// k 8 kb + e of step s = 2j + h is physical column 32j + 4h + 2kb +
/// 8(e / 2) + e % 2 of the chunk (the permutation of x's A fragments).
/// One thread per (chunk, pair j, row n) reads the row's 32 columns.
void emitWgmmaPack(KernelContext &ctx, const StagedPlan &sp) {
  int64_t N = sp.N, K = sp.K, NT = sp.nTiles, P = sp.parts, CH = sp.chunk();
  int64_t pairs = sp.pairs(), chunkBytes = sp.chunkBytes();
  int64_t rowsPad = NT * 8;
  packLaunch(ctx, sp, (sp.paddedK() / 32) * rowsPad, [&](LaunchBuilder &l, KernelBuilder &kb, Value i) {
    Value row = kb.rem(i, kb.idx(rowsPad)), q = kb.div(i, kb.idx(rowsPad));
    Value j = kb.rem(q, kb.idx(pairs)), c = kb.div(q, kb.idx(pairs));
    Value col = kb.add(kb.mul(c, kb.idx(CH)), kb.mul(j, kb.idx(32)));
    Value valid = kb.lt(row, kb.idx(N));
    Value phiRow = kb.mul(kb.min(row, kb.idx(N - 1)), kb.idx(K));
    SmallVector<Value> v, w;
    if (sp.anyK()) {
      v = loadStagedParams(kb, sp, l.arg("phi"), phiRow, col, 32);
      if (sp.hasWeight)
        w = loadStagedParams(kb, sp, l.arg("weight"), kb.idx(0), col, 32);
    } else {
      v = kb.loadF32(l.arg("phi"), kb.add(phiRow, col), 32);
      if (sp.hasWeight)
        w = kb.loadF32(l.arg("weight"), col, 32);
    }
    // parts[p][e]: part p of physical column e of the 32.
    SmallVector<SmallVector<Value>> parts(P);
    for (int64_t e = 0; e < 32; ++e) {
      SmallVector<Value> pe = bf16Parts(kb, v[e], sp.hasWeight ? w[e] : Value(), valid, P);
      for (int64_t p = 0; p < P; ++p)
        parts[p].push_back(pe[p]);
    }
    Value nb = kb.div(row, kb.idx(8)), r8 = kb.rem(row, kb.idx(8));
    Value inTile = kb.add(kb.mul(nb, kb.idx(128)), kb.mul(r8, kb.idx(8)));
    Value chunkBase = kb.mul(c, kb.idx(chunkBytes / 2));
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t half = 0; half < 2; ++half)
        for (int64_t p = 0; p < P; ++p) {
          SmallVector<Value> out;
          for (int64_t e = 0; e < 8; ++e)
            out.push_back(parts[p][4 * h + 2 * half + 8 * (e / 2) + e % 2]);
          Value s = kb.add(kb.mul(j, kb.idx(2)), kb.idx(h));
          Value tile = kb.mul(kb.add(kb.mul(s, kb.idx(P)), kb.idx(p)), kb.idx(NT * 128));
          Value off = kb.add(chunkBase, kb.add(tile, kb.add(inTile, kb.idx(64 * half))));
          kb.vstore(kb.vector(out), l.arg("packed"), off);
        }
  });
}

/// The pack launch for the mma.sync layout: one thread per 16-byte piece of
/// the packed parts.
void emitMmaSyncPack(KernelContext &ctx, const StagedPlan &sp) {
  int64_t NT = sp.nTiles, P = sp.parts, pairs = sp.pairs();
  packLaunch(ctx, sp, sp.paddedK() * P * NT, [&](LaunchBuilder &l, KernelBuilder &kb, Value i) {
    Value lane = kb.rem(i, kb.idx(32)), q = kb.div(i, kb.idx(32));
    Value nt = kb.rem(q, kb.idx(NT));
    q = kb.div(q, kb.idx(NT));
    Value part = kb.rem(q, kb.idx(P));
    q = kb.div(q, kb.idx(P));
    Value j = kb.rem(q, kb.idx(pairs)), c = kb.div(q, kb.idx(pairs));
    SmallVector<SmallVector<Value>> parts =
        pieceParts(kb, sp, l.arg("phi"), sp.hasWeight ? l.arg("weight") : Value(), c, j, nt, lane);
    SmallVector<Value> out;
    for (int64_t e = 0; e < 8; ++e) {
      Value sel = parts[0][e];
      for (int64_t p = 1; p < P; ++p)
        sel = kb.select(kb.eq(part, kb.idx(p)), parts[p][e], sel);
      out.push_back(sel);
    }
    kb.vstore(kb.vector(out), l.arg("packed"), kb.mul(i, kb.idx(8)));
  });
}

/// The partial launch's body: a block per (token block, split) streams its
/// range of chunks of packed B through the ring and multiplies its tokens'
/// x by them. The members up to bulkMode emit IR as they are initialised,
/// in declaration order.
class StagedPartial {
public:
  StagedPartial(const StagedPlan &p, LaunchBuilder &l, KernelBuilder &kb);
  void emit();

private:
  using Rows = SmallVector<SmallVector<Value>>;
  /// A chunk's loads, a chunk ahead with prefetch: x's 16 bytes per (row,
  /// pair) and, for the seam's expand, f's per (row, pair) and the bias'
  /// per pair, raw (the expand converts them).
  struct ChunkLoads {
    Rows xs, fs;
    SmallVector<Value> bias;
    void appendTo(SmallVector<Value> &values) const;
  };
  ChunkLoads chunkLoadsFrom(ValueRange values) const;
  void issueCopy(Value i, Value st);
  void fillChunk(Value i, Value st);
  void locateRows();
  Value chunkColumn(Value i);
  ChunkLoads loadChunk(Value i);
  Rows loadXAnyK(Value chunk);
  void expandRows(Value col, ChunkLoads &in);
  SmallVector<Value> emitKLoop();
  SmallVector<Value> emitChunk(Value i, ValueRange it, Value zero);
  Value acquireChunk(Value i);
  Rows pairWords(const Rows &xs, int64_t j, MutableArrayRef<Value> next);
  void wgmmaProducts(const Rows &xs, Value ringBase, MutableArrayRef<Value> next);
  void mmaSyncProducts(const Rows &xs, Value ringBase, MutableArrayRef<Value> next);
  Value bOffset(Value ringBase, int64_t j, int64_t part, int64_t nt);
  void storePartials(ArrayRef<Value> result);

  const StagedPlan &p;
  LaunchBuilder &l;
  KernelBuilder &kb;
  ProjectSplitK sk;
  Value count; // chunks in the block's range
  Value ring;
  BulkRing bulk;
  /// One token block: the block fills its buffers from phi w (no copies).
  Value small, bulkMode;
  /// [mt * 2 + h]: token g + 8h of m-tile mt, the same clamped to M - 1
  /// (for loads), and its x row's offset.
  SmallVector<Value> rows, loadRows, xRow;
};

StagedPartial::StagedPartial(const StagedPlan &p, LaunchBuilder &l,
                             KernelBuilder &kb)
    : p(p), l(l), kb(kb), sk(projectSplitK(kb, l, p.chunks())),
      count(kb.sub(sk.cEnd, sk.cBegin)), ring(l.shared(0)),
      bulk(kb, l.shared(1), kStages, kWarps),
      small(p.inlineSplit() ? kb.lt(sk.M, kb.idx(p.tokensPerBlock() + 1))
                            : kb.boolean(false)),
      bulkMode(kb.eq(small, kb.boolean(false))) {}

void StagedPartial::emit() {
  auto issue = [&](Value i, Value st) { issueCopy(i, st); };
  bulk.start(kb.select(small, kb.idx(0), count), issue);
  locateRows();
  storePartials(emitKLoop());
}

/// Thread 0: the copy of chunk `i` (of this block's range) into buffer `st`.
void StagedPartial::issueCopy(Value i, Value st) {
  int64_t chunkBytes = p.chunkBytes();
  Value bar = bulk.full(st);
  kb.mbarrierArriveExpectTx(bar, chunkBytes);
  Value src = kb.globalPtr(
      l.arg("packed"), kb.mul(kb.add(sk.cBegin, i), kb.idx(chunkBytes / 2)));
  Value dst = kb.sharedPtr(ring, kb.mul(st, kb.idx(chunkBytes / 4)));
  kb.bulkCopy(dst, src, chunkBytes, bar);
}

/// Chunk i of the block's range into buffer st, split by every thread:
/// the pieces the pack launch would write there.
void StagedPartial::fillChunk(Value i, Value st) {
  const int threads = 32 * kWarps;
  int64_t NT = p.nTiles, P = p.parts, chunkBytes = p.chunkBytes();
  int64_t items = p.pairs() * NT * 32;
  Value gc = kb.add(sk.cBegin, i);
  for (int64_t r = 0; r < (items + threads - 1) / threads; ++r) {
    Value q = kb.add(kb.threadId(), kb.idx(r * threads));
    kb.when(kb.lt(q, kb.idx(items)), [&] {
      Value pl = kb.rem(q, kb.idx(32)), pq = kb.div(q, kb.idx(32));
      Value nt = kb.rem(pq, kb.idx(NT)), j = kb.div(pq, kb.idx(NT));
      SmallVector<SmallVector<Value>> parts = pieceParts(
          kb, p, l.arg("phi"), p.hasWeight ? l.arg("weight") : Value(), gc, j, nt, pl);
      for (int64_t part = 0; part < P; ++part) {
        Value piece = kb.add(kb.mul(kb.add(kb.mul(kb.add(kb.mul(j, kb.idx(P)), kb.idx(part)),
                                                  kb.idx(NT)), nt), kb.idx(32)), pl);
        Value at = kb.add(kb.mul(st, kb.idx(chunkBytes / 4)), kb.mul(piece, kb.idx(4)));
        Value bits = vector::BitCastOp::create(kb.b, kb.loc, VectorType::get({4}, kb.b.getI32Type()),
                                               kb.vector(parts[part]));
        LLVM::StoreOp::create(kb.b, kb.loc, bits, kb.sharedPtr(ring, at), 16);
      }
    });
  }
}

/// Tokens g and g + 8 of each of the warp's m-tiles (clamped for loads).
/// With wgmma, warp w of group G holds rows 16w..16w+15 of each of the
/// group's 64-token m-tiles.
void StagedPartial::locateRows() {
  int64_t MT = p.mTiles;
  Value warp = sk.warp;
  Value inBlock = kb.mul(warp, kb.idx(16 * MT));
  int64_t tileStride = 16;
  if (p.wgmma) {
    inBlock = kb.add(kb.mul(kb.div(warp, kb.idx(4)), kb.idx(64 * MT)),
                     kb.mul(kb.rem(warp, kb.idx(4)), kb.idx(16)));
    tileStride = 64;
  }
  Value base = kb.add(kb.mul(sk.mBlock, kb.idx(p.tokensPerBlock())), kb.add(inBlock, sk.g));
  for (int64_t r = 0; r < 2 * MT; ++r)
    rows.push_back(r == 0 ? base : kb.add(base, kb.idx(tileStride * (r / 2) + 8 * (r % 2))));
  Value lastRow = kb.sub(sk.M, kb.idx(1));
  for (Value r : rows)
    loadRows.push_back(kb.min(r, lastRow));
  for (Value r : loadRows)
    xRow.push_back(kb.add(kb.mul(r, kb.idx(p.K)), kb.mul(sk.t, kb.idx(8))));
}

/// The first column of chunk i of the block's range.
Value StagedPartial::chunkColumn(Value i) {
  return kb.mul(kb.add(sk.cBegin, i), kb.idx(p.chunk()));
}

/// xs[r][j]: the 16 bytes of row r (m-tile r / 2, token g + 8 (r % 2)) for
/// pair j of chunk i of the block's range; with the expand, f's 8/n
/// channels of those positions per (r, j) and the bias' per j.
StagedPartial::ChunkLoads StagedPartial::loadChunk(Value i) {
  ChunkLoads in;
  if (p.anyK()) { // (never with the expand)
    in.xs = loadXAnyK(kb.add(sk.cBegin, i));
    return in;
  }
  Value col = chunkColumn(i);
  in.xs.resize(2 * p.mTiles);
  for (int64_t j = 0; j < p.pairs(); ++j)
    for (int64_t r = 0; r < 2 * p.mTiles; ++r)
      in.xs[r].push_back(kb.vload(l.arg("x"), kb.add(xRow[r], kb.add(col, kb.idx(32 * j))), 8));
  if (!p.expand)
    return in;
  int64_t per = 8 / p.n;
  in.fs.resize(2 * p.mTiles);
  for (int64_t j = 0; j < p.pairs(); ++j) {
    Value k0 = kb.add(col, kb.add(kb.idx(32 * j), kb.mul(sk.t, kb.idx(8))));
    Value c0 = kb.div(k0, kb.idx(p.n));
    for (int64_t r = 0; r < 2 * p.mTiles; ++r)
      in.fs[r].push_back(kb.vload(l.arg("f"), kb.add(kb.mul(loadRows[r], kb.idx(p.C)), c0), per));
    if (p.hasBias)
      in.bias.push_back(kb.vload(l.arg("bias"), c0, per));
  }
  return in;
}

void StagedPartial::ChunkLoads::appendTo(SmallVector<Value> &values) const {
  for (const Rows *rs : {&xs, &fs})
    for (const auto &row : *rs)
      values.append(row.begin(), row.end());
  values.append(bias.begin(), bias.end());
}

/// The loads that appendTo put in `values` (the loop's carried values).
StagedPartial::ChunkLoads StagedPartial::chunkLoadsFrom(ValueRange values) const {
  int64_t rows = 2 * p.mTiles, pairs = p.pairs(), at = 0;
  ChunkLoads in;
  auto take = [&](Rows &rs) {
    rs.resize(rows);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < pairs; ++j)
        rs[r].push_back(values[at++]);
  };
  take(in.xs);
  if (p.expand)
    take(in.fs);
  if (p.hasBias)
    for (int64_t j = 0; j < pairs; ++j)
      in.bias.push_back(values[at++]);
  assert(at == static_cast<int64_t>(values.size()));
  return in;
}

/// loadChunk's x at any K (x's rows 8-byte aligned, loads of p.xUnit elements):
/// the last chunk, which runs past K, masked at K in a branch of its own,
/// so that the other chunks load as they would at K % 8 == 0.
StagedPartial::Rows StagedPartial::loadXAnyK(Value chunk) {
  Value col = kb.mul(chunk, kb.idx(p.chunk()));
  auto load = [&](bool masked) {
    // (Masked: the lane's columns end at K - 8t.)
    Value laneEnd = masked ? kb.sub(kb.idx(p.K), kb.mul(sk.t, kb.idx(8))) : Value();
    SmallVector<Value> flat;
    for (int64_t r = 0; r < 2 * p.mTiles; ++r)
      for (int64_t j = 0; j < p.pairs(); ++j) {
        Value at = kb.add(col, kb.idx(32 * j));
        flat.push_back(masked ? loadStagedXMasked(kb, p, l.arg("x"), xRow[r], at, laneEnd)
                              : kb.vload(l.arg("x"), kb.add(xRow[r], at), 8));
      }
    return flat;
  };
  SmallVector<Value> flat = kb.ifElse(kb.eq(chunk, kb.idx(p.chunks() - 1)),
                                      [&] { return load(true); },
                                      [&] { return load(false); });
  Rows xs(2 * p.mTiles);
  for (int64_t r = 0; r < 2 * p.mTiles; ++r)
    xs[r].assign(flat.begin() + r * p.pairs(), flat.begin() + (r + 1) * p.pairs());
  return xs;
}

/// The seam's expand ((C, n) layout, n | 8): a lane's 8 values of a row at
/// physical columns k0..k0 + 7 are channels k0/n.. (8/n of them), all n
/// streams. Replaces them by x_next's (combineStream: expand_combine's
/// order, one rounding), stored for rows < M, so the products and sums of
/// squares see exactly what loading x_next would give.
void StagedPartial::expandRows(Value col, ChunkLoads &in) {
  int64_t n = p.n, per = 8 / n;
  Type act = kb.b.getBF16Type();
  auto f32s = [&](Value raw) {
    Value v = kb.toF32(raw);
    SmallVector<Value> out;
    for (int64_t c = 0; c < per; ++c)
      out.push_back(kb.extract(v, c));
    return out;
  };
  for (int64_t r = 0; r < 2 * p.mTiles; ++r) {
    Value m = loadRows[r];
    SmallVector<Value> post = loadRow(kb, l.arg("post"), m, n);
    SmallVector<Value> P = loadRow(kb, l.arg("P"), m, n * n);
    for (int64_t j = 0; j < p.pairs(); ++j) {
      SmallVector<Value> fb = f32s(in.fs[r][j]);
      if (p.hasBias) {
        SmallVector<Value> bias = f32s(in.bias[j]);
        for (int64_t c = 0; c < per; ++c)
          fb[c] = kb.add(fb[c], bias[c]);
      }
      Value xl = kb.toF32(in.xs[r][j]);
      SmallVector<Value> out;
      for (int64_t e = 0; e < 8; ++e) {
        int64_t c = e / n;
        out.push_back(combineStream(kb, n, e % n, post, P, fb[c], [&](int64_t i) {
          return kb.extract(xl, c * n + i);
        }));
      }
      Value next = kb.toType(kb.vector(out), act);
      Value at = kb.add(xRow[r], kb.add(col, kb.idx(32 * j)));
      kb.when(kb.lt(rows[r], sk.M), [&] { kb.vstore(next, l.arg("x_next"), at); });
      in.xs[r][j] = next;
    }
  }
}

/// The loop over the block's chunks. Its values: 4 accumulators per
/// (m-tile, n-tile) (rows g, g + 8 x columns 2t, 2t + 1), then the sums of
/// squares of the rows, then (with prefetch) the next chunk's loads.
SmallVector<Value> StagedPartial::emitKLoop() {
  Value zero = kb.f32(0.0);
  SmallVector<Value> init(p.accs() + 2 * p.mTiles, zero);
  if (p.prefetch())
    loadChunk(kb.idx(0)).appendTo(init);
  return kb.loop(kb.idx(0), count, kb.idx(1), init,
                 [&](Value i, ValueRange it) { return emitChunk(i, it, zero); });
}

/// One chunk: its x (expanded to x_next by the seam), its buffer, the
/// products and the buffer's release.
SmallVector<Value> StagedPartial::emitChunk(Value i, ValueRange it, Value zero) {
  int64_t MT = p.mTiles, accs = p.accs();
  SmallVector<Value> next(it.begin(), it.begin() + accs + 2 * MT);
  ChunkLoads in;
  std::optional<ChunkLoads> ahead;
  if (p.prefetch()) {
    // This chunk's loads came with the iteration values; the next
    // chunk's are in flight during this chunk's expand and mma's.
    in = chunkLoadsFrom(it.drop_front(accs + 2 * MT));
    ahead = loadChunk(kb.min(kb.add(i, kb.idx(1)), kb.sub(count, kb.idx(1))));
  } else {
    in = loadChunk(i);
  }
  if (p.expand)
    expandRows(chunkColumn(i), in);
  const Rows &xs = in.xs;
  Value st = acquireChunk(i);
  SmallVector<Value> total;
  if (p.precise)
    for (int64_t e = 0; e < accs; ++e) {
      total.push_back(next[e]);
      next[e] = zero;
    }
  Value ringBase = kb.mul(st, kb.idx(p.chunkBytes() / 4));
  if (p.wgmma)
    wgmmaProducts(xs, ringBase, next);
  else
    mmaSyncProducts(xs, ringBase, next);
  if (p.precise)
    for (int64_t e = 0; e < accs; ++e)
      next[e] = kb.add(total[e], next[e]);
  kb.when(bulkMode, [&] { bulk.release(i, sk.lane); });
  if (ahead)
    ahead->appendTo(next);
  return next;
}

/// The buffer that holds chunk i once every thread may read it.
Value StagedPartial::acquireChunk(Value i) {
  auto issue = [&](Value c, Value buf) { issueCopy(c, buf); };
  // Small: three buffers and a barrier after each fill (a thread
  // filling chunk i's buffer has passed the barrier after chunk
  // i - 1's fill, so every warp is done with chunk i - 3's reads).
  Value st = bulk.stage(i);
  if (p.inlineSplit()) {
    kb.when(small, [&] {
      fillChunk(i, st);
      kb.barrier();
    });
    kb.when(bulkMode, [&] { bulk.acquire(i, count, issue); });
  } else {
    bulk.acquire(i, count, issue);
  }
  return st;
}

/// The words of pair j's x rows (A fragments as loaded), their squares
/// added into the rows' sums.
StagedPartial::Rows StagedPartial::pairWords(const Rows &xs, int64_t j,
                                             MutableArrayRef<Value> next) {
  int64_t MT = p.mTiles, accs = p.accs();
  Rows w;
  for (int64_t r = 0; r < 2 * MT; ++r)
    w.push_back(words(kb, xs[r][j]));
  for (int64_t mt = 0; mt < MT; ++mt)
    for (int64_t e = 0; e < 4; ++e) {
      auto [a0, a1] = halves(kb, w[2 * mt][e]);
      auto [b0, b1] = halves(kb, w[2 * mt + 1][e]);
      Value &sa = next[accs + 2 * mt], &sb = next[accs + 2 * mt + 1];
      sa = kb.fma(a1, a1, kb.fma(a0, a0, sa));
      sb = kb.fma(b1, b1, kb.fma(b0, b0, sb));
    }
  return w;
}

/// The chunk's products on wgmma: the x words are its A fragments; the
/// products run asynchronously and are waited for before the buffer goes
/// back.
void StagedPartial::wgmmaProducts(const Rows &xs, Value ringBase,
                                  MutableArrayRef<Value> next) {
  int64_t MT = p.mTiles, NT = p.nTiles, P = p.parts;
  kb.wgmmaFence();
  for (int64_t j = 0; j < p.pairs(); ++j) {
    Rows w = pairWords(xs, j, next);
    for (int h = 0; h < 2; ++h)
      for (int64_t part = 0; part < P; ++part) {
        int64_t tile = ((2 * j + h) * P + part) * NT * 256;
        Value desc = kb.wgmmaDescriptor(
            ring, kb.add(ringBase, kb.idx(tile / 4)), /*lbo=*/128, /*sbo=*/256);
        for (int64_t mt = 0; mt < MT; ++mt)
          kb.wgmmaBf16(next.slice(4 * mt * NT, 4 * NT),
                       {w[2 * mt][2 * h], w[2 * mt + 1][2 * h],
                        w[2 * mt][2 * h + 1], w[2 * mt + 1][2 * h + 1]},
                       desc);
      }
  }
  kb.wgmmaCommit();
  kb.wgmmaWait(0);
}

/// Where this lane's 16 bytes of B for (pair j, part, n-tile nt) start in
/// the buffer at ringBase (an f32 index).
Value StagedPartial::bOffset(Value ringBase, int64_t j, int64_t part, int64_t nt) {
  int64_t P = p.parts, NT = p.nTiles;
  return kb.add(ringBase, kb.add(kb.idx(((j * P + part) * NT + nt) * 128),
                                 kb.mul(sk.lane, kb.idx(4))));
}

/// The chunk's products on mma.sync, B read from the buffer into registers.
void StagedPartial::mmaSyncProducts(const Rows &xs, Value ringBase,
                                    MutableArrayRef<Value> next) {
  int64_t MT = p.mTiles, NT = p.nTiles, P = p.parts;
  auto i32x4 = VectorType::get({4}, kb.b.getI32Type());
  auto i32x2 = VectorType::get({2}, kb.b.getI32Type());
  for (int64_t j = 0; j < p.pairs(); ++j) {
    // B: 16 bytes per lane per (part, n-tile), two k-steps' worth;
    // with two m-tiles, 8 bytes per k-step (fewer registers live).
    SmallVector<SmallVector<SmallVector<Value>>> bw(P);
    if (MT == 1)
      for (int64_t part = 0; part < P; ++part)
        for (int64_t nt = 0; nt < NT; ++nt) {
          Value raw = LLVM::LoadOp::create(kb.b, kb.loc, i32x4,
                                           kb.sharedPtr(ring, bOffset(ringBase, j, part, nt)), 16);
          bw[part].push_back(words(kb, raw));
        }
    Rows w = pairWords(xs, j, next);
    for (int h = 0; h < 2; ++h) {
      if (MT > 1)
        for (int64_t part = 0; part < P; ++part) {
          bw[part].clear();
          for (int64_t nt = 0; nt < NT; ++nt) {
            Value raw = LLVM::LoadOp::create(
                kb.b, kb.loc, i32x2,
                kb.sharedPtr(ring, kb.add(bOffset(ringBase, j, part, nt), kb.idx(2 * h))), 8);
            SmallVector<Value> four(4);
            four[2 * h] = kb.extract(raw, 0);
            four[2 * h + 1] = kb.extract(raw, 1);
            bw[part].push_back(four);
          }
        }
      // A: rows g and g + 8 at logical k {2t, 2t+1} then {2t+8, 2t+9}.
      SmallVector<SmallVector<Value>> A;
      for (int64_t mt = 0; mt < MT; ++mt)
        A.push_back({w[2 * mt][2 * h], w[2 * mt + 1][2 * h], w[2 * mt][2 * h + 1],
                     w[2 * mt + 1][2 * h + 1]});
      for (int64_t nt = 0; nt < NT; ++nt)
        for (int64_t part = 0; part < P; ++part)
          for (int64_t mt = 0; mt < MT; ++mt)
            mmaBf16(kb, A[mt], {bw[part][nt][2 * h], bw[part][nt][2 * h + 1]},
                    next.slice(4 * (mt * NT + nt), 4));
    }
  }
}

/// Writes each of the lane's rows' partials from the loop's results.
void StagedPartial::storePartials(ArrayRef<Value> result) {
  int64_t MT = p.mTiles, NT = p.nTiles, accs = p.accs();
  for (int64_t mt = 0; mt < MT; ++mt)
    for (int h = 0; h < 2; ++h)
      storeProjectPartials(kb, sk, l.arg("partials"), rows[2 * mt + h],
                           result[accs + 2 * mt + h], p.N, NT,
                           [&](int64_t nt, int64_t e) {
                             return result[4 * (mt * NT + nt) + 2 * h + e];
                           });
}

/// The partial launch: its parameters, grid and shared ring (kStages chunk
/// buffers and their full/empty mbarriers), then its body.
void emitStagedPartial(KernelContext &ctx, const StagedPlan &p) {
  LaunchBuilder &l = ctx.launch("partial");
  l.param("x");
  if (p.expand) {
    l.param("f").param("post").param("P");
    if (p.hasBias)
      l.param("bias");
    l.param("x_next");
  }
  l.param("packed");
  if (p.inlineSplit()) {
    l.param("phi");
    if (p.hasWeight)
      l.param("weight");
  }
  l.param("partials").param("M").param("S")
      .block(32 * kWarps)
      .grid({p.tokensPerBlock(), 0, /*timesSplit=*/true})
      .sharedF32(kStages * p.chunkBytes() / 4, /*align=*/128)
      .sharedI64(2 * kStages)
      .minBlocksPerSM(p.expand ? 1 : p.blocksPerSM);
  KernelBuilder kb = ctx.begin(l);
  limitRowAccesses(ctx, kb, l, {"x"});
  StagedPartial(p, l, kb).emit();
}

} // namespace

bool mlir::mhc::projectForwardExpands(const KernelContext &ctx) {
  std::optional<StagedPlan> p = planStaged(ctx);
  // (Not at any K: its f, x_next and bias accesses assume K % 8 == 0.)
  return p && !p->anyK() && !p->wgmma && p->mTiles == 1 &&
         ctx.spec.layout == ::mhc::Layout::CN && 8 % ctx.n() == 0;
}

LogicalResult mlir::mhc::buildProjectForwardExpand(KernelContext &ctx) {
  if (!projectForwardExpands(ctx))
    return failure();
  StagedPlan p = *planStaged(ctx);
  p.expand = true;
  p.hasBias = ctx.spec.hasBias;
  p.n = ctx.n();
  p.C = ctx.C();
  ctx.manifest.split = p.split;
  DType act = ctx.spec.act;
  // expand_combine's operands, x_next, then the projection's parameters.
  ctx.buffer("f", act, BufferRole::Input, {p.C, 0});
  ctx.buffer("post", DType::F32, BufferRole::Input, {p.n, 0});
  ctx.buffer("x", act, BufferRole::Input, {p.K, 0});
  ctx.buffer("P", DType::F32, BufferRole::Input, {p.n * p.n, 0});
  if (p.hasBias)
    ctx.buffer("bias", ctx.spec.param, BufferRole::Input, {0, p.C});
  ctx.buffer("x_next", act, BufferRole::Output, {p.K, 0});
  ctx.buffer("phi", ctx.spec.param, BufferRole::Input, {0, p.N * p.K});
  if (p.hasWeight)
    ctx.buffer("weight", ctx.spec.param, BufferRole::Input, {0, p.K});
  ctx.buffer("packed", DType::BF16, BufferRole::Workspace,
             {0, p.parts * p.nTiles * 8 * p.paddedK()});
  ctx.buffer("partials", DType::F32, BufferRole::Workspace, {0, 0, p.N + 1});
  emitMmaSyncPack(ctx, p);
  emitStagedPartial(ctx, p);
  return success();
}

bool mlir::mhc::projectForwardIsStaged(const KernelContext &ctx) {
  return planStaged(ctx).has_value();
}

LogicalResult mlir::mhc::buildProjectForwardStaged(KernelContext &ctx) {
  StagedPlan p = *planStaged(ctx);
  ctx.manifest.split = p.split;
  declareProjectForwardIO(ctx);
  ctx.buffer("packed", DType::BF16, BufferRole::Workspace,
             {0, p.parts * p.nTiles * 8 * p.paddedK()});
  ctx.buffer("partials", DType::F32, BufferRole::Workspace, {0, 0, p.N + 1});
  if (p.wgmma)
    emitWgmmaPack(ctx, p);
  else
    emitMmaSyncPack(ctx, p);
  emitStagedPartial(ctx, p);
  return success();
}
