//===- ForwardStagedPack.cpp - the staged forward's pack launches ---------===//
//
// phi w split once per call into bf16 parts, written in the order the
// partial launch's bulk copies move and its products read them: the
// mma.sync layout's fragment order or wgmma's K-major core matrices
// (ForwardStaged.cpp). The partial launch's inline split (one token block)
// writes the mma.sync layout's pieces itself (pieceParts).
//
//===----------------------------------------------------------------------===//

#include "kernels/project/ForwardStagedLaunches.h"
#include "kernels/project/Fragments.h"

using namespace mlir;
using namespace mlir::mhc;

namespace {

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

} // namespace

namespace {

/// The row of phi (not clamped) of n-tile nt's piece in `lane`.
Value pieceRow(KernelBuilder &kb, Value nt, Value lane) {
  return kb.add(kb.mul(nt, kb.idx(8)), kb.div(lane, kb.idx(4)));
}

/// Piece (chunk c, pair j, n-tile nt, lane)'s row of phi (not clamped) and
/// its first column.
std::pair<Value, Value> pieceAt(KernelBuilder &kb, const StagedPlan &sp, Value c, Value j,
                                Value nt, Value lane) {
  Value row = pieceRow(kb, nt, lane);
  Value col = kb.add(kb.add(kb.mul(c, kb.idx(sp.chunk())), kb.mul(j, kb.idx(32))),
                     kb.mul(kb.rem(lane, kb.idx(4)), kb.idx(8)));
  return {row, col};
}

/// phi's 8 f32 values at (row clamped to N - 1, col), then the weight's.
SmallVector<Value> loadPiece(KernelBuilder &kb, const StagedPlan &sp, Value phi, Value weight,
                             Value row, Value col) {
  Value rowOff = kb.mul(kb.min(row, kb.idx(sp.N - 1)), kb.idx(sp.K));
  SmallVector<Value> v, w;
  if (sp.anyK()) {
    v = loadStagedParams(kb, sp, phi, rowOff, col, 8);
    if (sp.hasWeight)
      w = loadStagedParams(kb, sp, weight, kb.idx(0), col, 8);
  } else {
    v = kb.loadF32(phi, kb.add(rowOff, col), 8);
    if (sp.hasWeight)
      w = kb.loadF32(weight, col, 8);
  }
  v.append(w.begin(), w.end());
  return v;
}

/// Every part's piece from its f32 values; zeros where !valid (row >= N).
SmallVector<SmallVector<Value>> partsOf(KernelBuilder &kb, const StagedPlan &sp,
                                        ArrayRef<Value> loads, Value valid) {
  SmallVector<SmallVector<Value>> parts(sp.parts);
  for (int64_t e = 0; e < 8; ++e) {
    SmallVector<Value> pe = bf16Parts(kb, loads[e], sp.hasWeight ? loads[8 + e] : Value(), valid, sp.parts);
    for (int64_t p = 0; p < sp.parts; ++p)
      parts[p].push_back(pe[p]);
  }
  return parts;
}

} // namespace

SmallVector<Value> mlir::mhc::pieceLoads(KernelBuilder &kb, const StagedPlan &sp,
                                         Value phi, Value weight, Value c,
                                         Value j, Value nt, Value lane) {
  auto [row, col] = pieceAt(kb, sp, c, j, nt, lane);
  return loadPiece(kb, sp, phi, weight, row, col);
}

SmallVector<SmallVector<Value>> mlir::mhc::piecePartsOf(KernelBuilder &kb, const StagedPlan &sp,
                                                        ArrayRef<Value> loads, Value nt,
                                                        Value lane) {
  return partsOf(kb, sp, loads, kb.lt(pieceRow(kb, nt, lane), kb.idx(sp.N)));
}

SmallVector<SmallVector<Value>> mlir::mhc::pieceParts(KernelBuilder &kb, const StagedPlan &sp,
                                                      Value phi, Value weight, Value c,
                                                      Value j, Value nt, Value lane) {
  auto [row, col] = pieceAt(kb, sp, c, j, nt, lane);
  Value valid = kb.lt(row, kb.idx(sp.N));
  return partsOf(kb, sp, loadPiece(kb, sp, phi, weight, row, col), valid);
}

void mlir::mhc::emitWgmmaPack(KernelContext &ctx, const StagedPlan &sp) {
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

void mlir::mhc::emitMmaSyncPack(KernelContext &ctx, const StagedPlan &sp) {
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
