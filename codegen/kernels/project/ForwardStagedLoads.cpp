//===- ForwardStagedLoads.cpp - the staged partial's loads ----------------===//
//
// Where a lane's rows are and what it loads per chunk (ForwardStaged.cpp):
// x's 16 bytes per (row, pair), masked at K in the last chunk at any K,
// and the layer seam's expand of them into x_next (f, bias, post, P).
//
//===----------------------------------------------------------------------===//

#include "builder/Streams.h"
#include "kernels/project/ForwardStagedLaunches.h"

#include "mlir/Dialect/Arith/IR/Arith.h"

using namespace mlir;
using namespace mlir::mhc;

/// Tokens g and g + 8 of each of the warp's m-tiles (clamped for loads;
/// with parityRows 2g and 2g + 1). With wgmma, warp w of group G holds rows
/// 16w..16w+15 of each of the group's 64-token m-tiles.
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
  if (p.parityRows())
    return locateParityRows(kb.add(kb.mul(sk.mBlock, kb.idx(p.tokensPerBlock())), inBlock),
                            tileStride);
  Value base = kb.add(kb.mul(sk.mBlock, kb.idx(p.tokensPerBlock())), kb.add(inBlock, sk.g));
  for (int64_t r = 0; r < 2 * MT; ++r)
    rows.push_back(r == 0 ? base : kb.add(base, kb.idx(tileStride * (r / 2) + 8 * (r % 2))));
  liveWarp = kb.lt(kb.sub(base, sk.g), sk.M);
  Value lastRow = kb.sub(sk.M, kb.idx(1));
  for (Value r : rows)
    loadRows.push_back(kb.min(r, lastRow));
  for (Value r : loadRows)
    xRow.push_back(kb.add(kb.mul(r, kb.idx(p.K)), kb.mul(sk.t, kb.idx(8))));
  if (p.realignX())
    locateShifts();
  if (p.halfRows())
    locateHalfShifts();
}

/// The block's tokens' post and P (rows past M - 1 as M - 1) into `mixing`,
/// every thread's loads issued before it stores any: the expand reads them
/// every chunk, and from global memory each chunk waited an L2 round trip.
void StagedPartial::stageMixing() {
  int64_t n = p.n, width = n + n * n, threads = 32 * kWarps, tokens = p.tokensPerBlock();
  mixing = l.shared(2);
  Value first = kb.mul(sk.mBlock, kb.idx(tokens)), last = kb.sub(sk.M, kb.idx(1));
  SmallVector<std::tuple<Value, Value, Value>> loaded; // (in range, offset, value)
  for (auto [name, values, at] : {std::make_tuple("post", n, int64_t(0)),
                                  std::make_tuple("P", n * n, n)})
    for (int64_t u = 0; u < tokens * values; u += threads) {
      Value e = kb.add(kb.threadId(), kb.idx(u));
      Value token = kb.div(e, kb.idx(values)), k = kb.rem(e, kb.idx(values));
      Value m = kb.min(kb.add(first, token), last);
      loaded.push_back({kb.lt(e, kb.idx(tokens * values)),
                        kb.add(kb.mul(token, kb.idx(width)), kb.add(k, kb.idx(at))),
                        kb.load(l.arg(name), kb.add(kb.mul(m, kb.idx(values)), k))});
    }
  for (auto [ok, off, v] : loaded)
    kb.when(ok, [&, off = off, v = v] { kb.store(v, mixing, off); });
}

/// The first column of chunk i of the block's range.
Value StagedPartial::chunkColumn(Value i) {
  return kb.mul(kb.add(sk.cBegin, i), kb.idx(p.chunk()));
}

/// The lane's first column of pair j of the chunk at column `col`.
Value StagedPartial::laneColumn(Value col, int64_t j) {
  return kb.add(col, kb.add(kb.idx(32 * j), kb.mul(sk.t, kb.idx(8))));
}

/// xs[r][j]: the 16 bytes of row r (m-tile r / 2, rows[r]) for
/// pair j of chunk i of the block's range; with the expand, f's 8/n
/// channels of those positions per (r, j) and the bias' per j.
StagedPartial::ChunkLoads StagedPartial::loadChunk(Value i) {
  ChunkLoads in;
  in.pieces = loadPieces(i);
  Value col = chunkColumn(i);
  if (p.anyK()) {
    loadXAnyK(kb.add(sk.cBegin, i), in);
  } else {
    in.xs.resize(2 * p.mTiles);
    for (int64_t j = 0; j < p.pairs(); ++j)
      for (int64_t r = 0; r < 2 * p.mTiles; ++r)
        in.xs[r].push_back(kb.vload(l.arg("x"), kb.add(xRow[r], kb.add(col, kb.idx(32 * j))), 8));
  }
  if (!p.expand)
    return in;
  int64_t per = 8 / p.n;
  in.fs.resize(2 * p.mTiles);
  for (int64_t j = 0; j < p.pairs(); ++j) {
    // Past K (the masked last chunk; K % 8 == 0, so a lane's 8 columns lie
    // wholly before K or past it) channel 0's, which expandRows discards.
    Value k0 = laneColumn(col, j);
    Value c0 = kb.div(k0, kb.idx(p.n));
    if (p.anyK())
      c0 = kb.select(kb.lt(k0, kb.idx(p.K)), c0, kb.idx(0));
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
  values.append(pieces.begin(), pieces.end());
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
  in.pieces.assign(values.begin() + at, values.end());
  return in;
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
  Value first = kb.mul(sk.mBlock, kb.idx(p.tokensPerBlock()));
  Value zeros; // x_next past K at any K
  if (p.anyK())
    zeros = arith::ConstantOp::create(kb.b, kb.loc,
                                      cast<TypedAttr>(kb.b.getZeroAttr(VectorType::get({8}, act))));
  for (int64_t r = 0; r < 2 * p.mTiles; ++r) {
    SmallVector<Value> mix = loadRow(kb, mixing, kb.sub(loadRows[r], first), n + n * n);
    ArrayRef<Value> post = ArrayRef<Value>(mix).take_front(n), P = ArrayRef<Value>(mix).drop_front(n);
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
      Value store = kb.lt(rows[r], sk.M);
      if (p.anyK()) { // x_next past K: zeros for the products, not stored
        Value inK = kb.lt(laneColumn(col, j), kb.idx(p.K));
        next = kb.select(inK, next, zeros);
        store = kb.andi(store, inK);
      }
      kb.when(store, [&] { kb.vstore(next, l.arg("x_next"), at); });
      in.xs[r][j] = next;
    }
  }
}
