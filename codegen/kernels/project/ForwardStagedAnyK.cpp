//===- ForwardStagedAnyK.cpp - the staged forward at K % 8 != 0 -----------===//
//
// Any K (docs/design/project.md, "Any K"): at K = n*C not a multiple of the
// chunk, the staged forward's last chunk runs past K. The pack writes B
// there as zeros (phi / weight read masked at K), and the partial's last
// chunk reads x masked at K, so that products and sums of squares past K
// add zeros. Rows of x (and phi) start only 8-byte aligned at K % 8 == 4:
// every masked access here is one of the rows' alignment and reads an
// element that exists (the row's start) instead of the next row or past the
// buffer. At 2- and 4-byte rows the other chunks' x loads as
// ForwardStagedRows.cpp says.
//
//===----------------------------------------------------------------------===//

#include "kernels/project/ForwardStagedLaunches.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;
using namespace mlir::mhc;

SmallVector<Value> mlir::mhc::loadStagedParams(KernelBuilder &kb,
                                               const StagedPlan &p, Value mem,
                                               Value rowOff, Value col,
                                               int64_t count) {
  int64_t unit = p.paramUnit;
  SmallVector<Value> out;
  for (int64_t e0 = 0; e0 < count; e0 += unit) {
    Value at = kb.add(col, kb.idx(e0));
    // K % unit == 0 (the unit divides the rows' alignment), so a piece
    // lies wholly before K or wholly past it.
    Value ok = kb.lt(at, kb.idx(p.K));
    SmallVector<Value> v =
        kb.loadF32(mem, kb.add(rowOff, kb.select(ok, at, kb.idx(0))), unit);
    for (Value e : v)
      out.push_back(kb.select(ok, e, kb.f32(0.0)));
  }
  return out;
}

Value mlir::mhc::loadStagedXMasked(KernelBuilder &kb, const StagedPlan &p,
                                   Value x, Value rowOff, Value col,
                                   Value end) {
  // Pieces of whole 32-bit words where rows are at least 4-byte aligned,
  // masked as words: 16-bit selects would hold each value in a register of
  // its own. At 2-byte rows (once per row, the last chunk) by element.
  int64_t unit = p.xUnit, words = unit / 2;
  if (unit == 1) {
    Type elem = cast<MemRefType>(x.getType()).getElementType();
    Value zero = arith::ConstantOp::create(kb.b, kb.loc, kb.b.getZeroAttr(elem));
    Value last = kb.sub(end, kb.idx(1));
    SmallVector<Value> out;
    for (int64_t e = 0; e < 8; ++e) {
      Value at = kb.add(col, kb.idx(e));
      Value ok = kb.lt(at, end);
      out.push_back(kb.select(ok, kb.load(x, kb.add(rowOff, kb.select(ok, at, last))), zero));
    }
    return kb.vector(out);
  }
  Type i32 = kb.b.getI32Type();
  auto pieceWords = VectorType::get({words}, i32);
  Value zero = arith::ConstantOp::create(
      kb.b, kb.loc, DenseElementsAttr::get(pieceWords, kb.b.getZeroAttr(i32)));
  SmallVector<Value> out;
  for (int64_t e0 = 0; e0 < 8; e0 += unit) {
    Value at = kb.add(col, kb.idx(e0));
    Value ok = kb.lt(at, end);
    Value safe = kb.sub(end, kb.idx(unit));
    Value v = kb.vload(x, kb.add(rowOff, kb.select(ok, at, safe)), unit);
    v = kb.select(ok, vector::BitCastOp::create(kb.b, kb.loc, pieceWords, v), zero);
    for (int64_t e = 0; e < words; ++e)
      out.push_back(kb.extract(v, e));
  }
  return xFromWords(kb, out, cast<MemRefType>(x.getType()).getElementType());
}

/// loadChunk's x at any K (x's rows 8- or 4-byte aligned): the last chunk,
/// which runs past K, masked at K in a branch of its own (loads of p.xUnit
/// elements), so that the other chunks load as they would at K % 8 == 0:
/// in loads of p.xUnit elements, or with realignX the two aligned granules
/// that realignRows shifts (the masked chunk's values twice, unshifted).
void StagedPartial::loadXAnyK(Value chunk, ChunkLoads &in) {
  Value col = kb.mul(chunk, kb.idx(p.chunk()));
  int64_t per = p.realignX() ? 2 : 1;
  auto load = [&](bool masked) {
    // (Masked: the lane's columns end at K - 8t.)
    Value laneEnd = masked ? kb.sub(kb.idx(p.K), kb.mul(sk.t, kb.idx(8))) : Value();
    SmallVector<Value> flat;
    for (int64_t r = 0; r < 2 * p.mTiles; ++r)
      for (int64_t j = 0; j < p.pairs(); ++j) {
        Value at = kb.add(col, kb.idx(32 * j));
        if (masked) {
          flat.append(per, loadStagedXMasked(kb, p, l.arg("x"), xRow[r], at, laneEnd));
        } else if (per == 2) {
          // Granules that hold a byte of x: inside its allocation.
          kb.withAccessLimit(16, [&] {
            Value first = kb.add(xRowAligned[r], at);
            flat.push_back(kb.vload(l.arg("x"), first, 8));
            flat.push_back(kb.vload(l.arg("x"), kb.add(first, xNextStep[r]), 8));
          });
        } else if (p.parityRows()) {
          flat.push_back(loadParityRow(r, at));
        } else if (p.halfRows()) {
          Value first = kb.add(xRowAligned[r], at);
          flat.push_back(loadHalfRow(first, kb.add(first, xNextStep[r]), halfShift[r]));
        } else {
          flat.push_back(kb.vload(l.arg("x"), kb.add(xRow[r], at), 8));
        }
      }
    return flat;
  };
  SmallVector<Value> flat = kb.ifElse(kb.eq(chunk, kb.idx(p.chunks() - 1)),
                                      [&] { return load(true); },
                                      [&] { return load(false); });
  in.xs.assign(2 * p.mTiles, {});
  in.xsNext.assign(per == 2 ? 2 * p.mTiles : 0, {});
  for (int64_t r = 0; r < 2 * p.mTiles; ++r)
    for (int64_t j = 0; j < p.pairs(); ++j) {
      int64_t at = (r * p.pairs() + j) * per;
      in.xs[r].push_back(flat[at]);
      if (per == 2)
        in.xsNext[r].push_back(flat[at + 1]);
    }
}

