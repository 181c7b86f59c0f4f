//===- BackwardMmaAnyK.cpp - the mma.sync backward's rows at any K -------===//
//
// x's rows at K = n*C not a multiple of 8 (issue 35; docs/design/project.md,
// "Any K"): the lane's columns loaded and stored in pieces masked at K, x
// pieces under 4 bytes copied by ld/st, and the block ring's rows at
// K % 8 == 4 (parityRows), whose shift follows the row's parity.
//
//===----------------------------------------------------------------------===//

#include "kernels/project/BackwardMmaMain.h"
#include "kernels/project/Fragments.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;
using namespace mlir::mhc;

/// Whether the lane's column colBase + offset is < K (false where the lane
/// is not active).
Value MmaMain::colsIn(int64_t offset) {
  if (offset == 0)
    return active;
  return kb.andi(active, kb.lt(kb.add(colBase, kb.idx(offset)), kb.idx(p.K)));
}

/// One x piece of `unit` bytes (x element xOff) to the ring's `dst`
/// (xSlotPtr), zeros where !ok: by cp.async, or by ld/st for 2-byte pieces
/// (odd K). The lane alone reads the piece back (enterStep), so program
/// order orders the ld/st; reuse of the slot is the same lane's too.
void MmaMain::copyX(Value dst, Value xOff, Value ok) {
  if (!p.syncCopy) {
    kb.copyAsync(dst, kb.globalPtr(l.arg("x"), xOff), p.unit,
                 kb.select(ok, kb.i32(p.unit), kb.i32(0)));
    return;
  }
  Value v = kb.load(l.arg("x"), kb.select(ok, xOff, kb.idx(0)));
  Value zeroAct = arith::ConstantOp::create(kb.b, kb.loc, kb.b.getFloatAttr(v.getType(), 0.0));
  v = kb.select(ok, v, zeroAct);
  LLVM::StoreOp::create(kb.b, kb.loc, v, dst, p.unit);
}

/// The lane's laneCols columns of a row as f32 (zeros past K), `at(col)`
/// the offset of the row's column col; with masks (K % laneCols != 0) in
/// pieces of colPiece, each read only where it lies before K.
SmallVector<Value> MmaMain::loadLaneCols(Value mem, function_ref<Value(Value)> at) {
  if (!masked())
    return loadRun(kb, mem, at(col0), p.laneCols);
  SmallVector<Value> out;
  for (int64_t i = 0; i < p.laneCols; i += p.colPiece) {
    Value ok = colsIn(i);
    Value col = kb.select(ok, kb.add(col0, kb.idx(i)), kb.idx(0));
    for (Value v : kb.loadF32(mem, at(col), p.colPiece))
      out.push_back(kb.select(ok, v, zero));
  }
  return out;
}

/// Stores the lane's columns of a row (at(col) as above), those before K.
void MmaMain::storeLaneCols(ArrayRef<Value> vals, Value mem,
                            function_ref<Value(Value)> at) {
  if (!masked()) {
    kb.storeFrom(vals, mem, at(col0));
    return;
  }
  for (int64_t i = 0; i < p.laneCols; i += p.colPiece)
    kb.when(colsIn(i), [&] {
      kb.storeFrom(vals.slice(i, p.colPiece), mem, at(kb.add(col0, kb.idx(i))));
    });
}

/// The shared address of xSlot's piece. 2-byte pieces (odd K) are not
/// float slots: their byte offset within the stage is (piece * 32 + lane)
/// * 2 (a float index would give every lane the same slot).
Value MmaMain::xSlotPtr(Value base, int64_t u, int64_t c) {
  if (p.unit >= 4)
    return kb.sharedPtr(ring, xSlot(base, u, c));
  return kb.bytePtr(kb.sharedPtr(ring, base),
                    kb.add(kb.idx((u * p.copies + c) * 32 * p.unit),
                           kb.mul(lane, kb.idx(p.unit))));
}

/// The block ring's rows at xAlign 8: row m0 + r (m0 a multiple of 8)
/// starts 8 (r % 2) bytes past a 16-byte boundary, so its copy starts at
/// that boundary and ends at the one at or above its slice's end (the
/// 16-byte granules holding its bytes: never outside x's allocation), the
/// row 8 (r % 2) bytes into its slot. Rows past M are zeros, not a copy of
/// row M - 1: that row's parity may differ from their shift.
void MmaMain::issueParityRows(Value base, Value m0, Value rows, Value ghBytes, Value bar) {
  kb.loop(kb.mul(rows, kb.idx(p.rowBytes / 4)), kb.idx(p.xFloats), kb.idx(1),
          [&](Value e) { kb.store(zero, ring, kb.add(base, e)); });
  std::array<Value, 2> bytes;
  for (int64_t q = 0; q < 2; ++q)
    bytes[q] = kb.mul(kb.div(kb.add(xRowBytes, kb.idx(8 * q + 15)), kb.idx(16)), kb.idx(16));
  Value xBytes = bytes[0]; // rows >= 1
  for (int64_t r = 1; r < 8; ++r)
    xBytes = kb.add(xBytes, kb.select(kb.lt(kb.idx(r), rows), bytes[r % 2], kb.idx(0)));
  kb.mbarrierArriveExpectTx(bar, kb.indexToI32(kb.add(xBytes, ghBytes)));
  for (int64_t r = 0; r < 8; ++r) {
    auto copy = [&] {
      Value start = kb.add(kb.mul(kb.add(m0, kb.idx(r)), kb.idx(p.K)), sliceCol);
      start = kb.sub(start, kb.idx(8 * (r % 2) / p.actBytes));
      kb.bulkCopy(kb.sharedPtr(ring, kb.add(base, kb.idx(r * p.rowBytes / 4))),
                  kb.globalPtr(l.arg("x"), start), kb.indexToI32(bytes[r % 2]), bar);
    };
    if (r == 0)
      copy();
    else
      kb.when(kb.lt(kb.idx(r), rows), copy);
  }
}

/// x of token 2t + u (8u bytes into its slot) as f32. A lane's 16-byte run
/// (wideRuns): one 16-byte load at u = 0; at u = 1 two 8-byte loads, lanes
/// of odd t reading the second piece first: lanes (g, t) and (g + 2, t - 1)
/// address the same 16 bytes' banks (slot rows 2t 8 banks apart, rowBytes
/// = 16 mod 128), and would conflict reading the same half of them.
void MmaMain::loadParityX(StepValues &s, int u) {
  Type elem = elementType(kb.b.getContext(), act);
  Value at = kb.add(kb.mul(t, kb.idx(2 * p.rowBytes)), kb.mul(laneColInBlock, kb.idx(p.actBytes)));
  at = kb.add(at, kb.idx(u * p.rowBytes + 8 * u));
  auto load = [&](Value byte, int64_t bytes) -> Value {
    Type vt = VectorType::get({bytes / p.actBytes}, elem);
    Value src = kb.sharedPtr(ring, kb.add(s.base, kb.div(byte, kb.idx(4))));
    return LLVM::LoadOp::create(kb.b, kb.loc, vt, src, bytes);
  };
  SmallVector<Value> raw;
  if (!p.wideRuns) {
    for (int64_t c = 0; c < p.copies; ++c)
      raw.push_back(load(kb.add(at, kb.idx(c * p.unit)), p.unit));
  } else if (u == 0) {
    raw.push_back(load(at, 16));
  } else {
    Value odd = kb.eq(kb.rem(t, kb.idx(2)), kb.idx(1));
    Value first = kb.select(odd, kb.idx(8), kb.idx(0));
    Value a = load(kb.add(at, first), 8);
    Value b = load(kb.add(at, kb.sub(kb.idx(8), first)), 8);
    raw = {kb.select(odd, b, a), kb.select(odd, a, b)};
  }
  for (Value r : raw) {
    Value v = kb.toF32(r);
    for (int64_t i = 0; i < cast<VectorType>(r.getType()).getNumElements(); ++i)
      s.xa[u].push_back(kb.extract(v, i));
  }
}

/// gx of a warp whose columns are all < K (wideRuns), as whole 16-byte
/// pieces where the rows allow: token 2t's row starts at a 16-byte
/// boundary (one store); token 2t + 1's 8 bytes past one, so lane g stores
/// the 16 bytes from its fifth column (its last four, lane g + 1's first
/// four), and lanes 0 and 7 the 8 bytes at either end of the warp's run.
void MmaMain::storeParityGx(StepValues &s, ArrayRef<SmallVector<Value>> gx) {
  Type elem = elementType(kb.b.getContext(), act), i32 = kb.b.getI32Type();
  auto words = [&](ArrayRef<Value> vals) {
    Value packed = vector::BitCastOp::create(kb.b, kb.loc, VectorType::get({4}, i32),
                                             kb.toType(kb.vector(vals), elem));
    SmallVector<Value> out;
    for (int64_t i = 0; i < 4; ++i)
      out.push_back(kb.extract(packed, i));
    return out;
  };
  auto store = [&](ArrayRef<Value> ws, Value elemAt, int64_t align) {
    LLVM::StoreOp::create(kb.b, kb.loc, kb.vector(ws), kb.globalPtr(l.arg("gx"), elemAt), align);
  };
  SmallVector<Value> even = words(gx[0]);
  kb.when(s.tokOk[0], [&] { store(even, kb.add(kb.mul(s.tok[0], kb.idx(p.K)), col0), 16); });
  SmallVector<Value> odd = words(gx[1]);
  SmallVector<Value> next;
  for (int64_t i = 0; i < 2; ++i)
    next.push_back(gpu::ShuffleOp::create(kb.b, kb.loc, odd[i], 4, 32, gpu::ShuffleMode::DOWN)
                       .getShuffleResult());
  kb.when(s.tokOk[1], [&] {
    Value at = kb.add(kb.mul(s.tok[1], kb.idx(p.K)), col0);
    Value mid = kb.add(at, kb.idx(8 / p.actBytes)); // the lane's fifth column
    kb.when(kb.lt(g, kb.idx(7)), [&] { store({odd[2], odd[3], next[0], next[1]}, mid, 16); });
    Value head = kb.eq(g, kb.idx(0));
    Value edge = arith::OrIOp::create(kb.b, kb.loc, head, kb.eq(g, kb.idx(7)));
    kb.when(edge, [&] {
      store({kb.select(head, odd[0], odd[2]), kb.select(head, odd[1], odd[3])},
            kb.select(head, at, mid), 8);
    });
  });
}
