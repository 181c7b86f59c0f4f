//===- BackwardMmaGxGranules.cpp - gx in aligned 16-byte granules ---------===//
//
// The per-warp ring at 2- and 4-byte rows (MmaPlan::gxGranules): a lane of
// laneCols 8 stores gx as the aligned 16-byte granule that holds its first
// column, whose first elements are the lane before's (g - 1), so that a
// warp's stores of a row are whole granules instead of 4-byte pieces. At
// 4-byte rows the lanes trade words by shuffles; at 2-byte rows through
// the step's stage (fewer instructions than shuffles and selects shifted
// by half-words). The warp's two edges (lane g = 0's head, g = 7's tail)
// go in pieces of their alignment; lanes whose columns cross K store
// theirs as before (storeLaneCols).
//
//===----------------------------------------------------------------------===//

#include "kernels/project/BackwardMmaMain.h"
#include "kernels/project/ForwardStagedPlan.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;
using namespace mlir::mhc;

namespace {

/// Word `i` (an index Value) of four words, by selects.
Value pickWord(KernelBuilder &kb, ArrayRef<Value> w, Value i) {
  Value lo = kb.select(kb.eq(i, kb.idx(1)), w[1], w[0]);
  Value hi = kb.select(kb.eq(i, kb.idx(3)), w[3], w[2]);
  return kb.select(kb.lt(i, kb.idx(2)), lo, hi);
}

} // namespace

/// The granule image's pieces [from, 8) (head) or [0, to) (tail) in
/// elements, each a store of its alignment: 1, 2 then 4 elements up from
/// `from`; 4, 2 then 1 up to `to`. `base`: the granule's first element.
void MmaMain::storeGranulePieces(ArrayRef<Value> words, Value base, Value from, Value to) {
  Type elem = cast<VectorType>(actVec).getElementType();
  Value mem = l.arg("gx");
  auto odd = [&](Value v) { return kb.eq(kb.rem(v, kb.idx(2)), kb.idx(1)); };
  if (from) {
    // [from, 8): an odd from's element is the high half of word from / 2.
    kb.when(odd(from), [&] {
      Value w = pickWord(kb, words, kb.div(from, kb.idx(2)));
      Value v = kb.vector({kb.extract(xFromWords(kb, {w}, elem), 1)});
      kb.withAccessLimit(2, [&] { kb.vstore(v, mem, kb.add(base, from)); });
    });
    Value a = kb.add(from, kb.rem(from, kb.idx(2)));
    kb.when(kb.eq(kb.rem(a, kb.idx(4)), kb.idx(2)), [&] {
      Value w = kb.select(kb.eq(a, kb.idx(2)), words[1], words[3]);
      kb.withAccessLimit(4, [&] { kb.vstore(xFromWords(kb, {w}, elem), mem, kb.add(base, a)); });
    });
    kb.when(kb.lt(a, kb.idx(5)), [&] {
      kb.withAccessLimit(8, [&] {
        kb.vstore(xFromWords(kb, {words[2], words[3]}, elem), mem, kb.add(base, kb.idx(4)));
      });
    });
    return;
  }
  // [0, to): 4 elements where to & 4, then 2, then 1.
  kb.when(kb.lt(kb.idx(3), to), [&] {
    kb.withAccessLimit(8, [&] { kb.vstore(xFromWords(kb, {words[0], words[1]}, elem), mem, base); });
  });
  Value at4 = kb.mul(kb.div(to, kb.idx(4)), kb.idx(4));
  kb.when(kb.eq(kb.rem(kb.div(to, kb.idx(2)), kb.idx(2)), kb.idx(1)), [&] {
    Value w = kb.select(kb.eq(at4, kb.idx(0)), words[0], words[2]);
    kb.withAccessLimit(4, [&] { kb.vstore(xFromWords(kb, {w}, elem), mem, kb.add(base, at4)); });
  });
  Value at2 = kb.mul(kb.div(to, kb.idx(2)), kb.idx(2));
  kb.when(odd(to), [&] {
    Value w = pickWord(kb, words, kb.div(at2, kb.idx(2)));
    Value v = kb.vector({kb.extract(xFromWords(kb, {w}, elem), 0)});
    kb.withAccessLimit(2, [&] { kb.vstore(v, mem, kb.add(base, at2)); });
  });
}

/// How many elements past an aligned granule token 2t + u's row starts:
/// ((2t + u) K) % 8, a constant of the lane (a step's first token m0 has
/// m0 % 8 == 0; rows past M are not stored).
Value MmaMain::granuleOffset(int u) {
  return kb.rem(kb.mul(kb.add(kb.mul(t, kb.idx(2)), kb.idx(u)), kb.idx(p.K % 8)), kb.idx(8));
}

/// Token 2t + u's gx (laneCols = 8 values) as a vector of x's dtype.
Value MmaMain::gxVector(ArrayRef<Value> gxU) {
  Type elem = cast<VectorType>(actVec).getElementType();
  SmallVector<Value> vals;
  for (Value v : gxU)
    vals.push_back(kb.toType(v, elem));
  return kb.vector(vals);
}

/// Token 2t + u's gx where its row is below M, from the images of its
/// lane's granule g and the next one (`granule`, `tail`: 4 words each), the
/// row r elements past a granule: the granule whole where the lane's
/// columns lie inside K (g = 0 at r > 0: its pieces from r), the next
/// granule's first r where lane g + 1 does not store it; else by element.
void MmaMain::storeGranules(StepValues &s, int u, ArrayRef<Value> gxU, Value r,
                            ArrayRef<Value> granule, ArrayRef<Value> tail) {
  Type elem = cast<VectorType>(actVec).getElementType();
  const int64_t K = p.K;
  Value start = kb.add(kb.mul(s.tok[u], kb.idx(K)), col0);
  Value base = kb.sub(start, r);
  Value inK = kb.lt(kb.add(colBase, kb.idx(7)), kb.idx(K));
  Value aligned = kb.eq(r, kb.idx(0));
  kb.when(s.tokOk[u], [&] {
    kb.ifElse(kb.andi(active, inK), [&] {
      Value whole = arith::OrIOp::create(kb.b, kb.loc, aligned, kb.lt(kb.idx(0), g));
      kb.ifElse(whole, [&] {
        kb.withAccessLimit(16, [&] { kb.vstore(xFromWords(kb, granule, elem), l.arg("gx"), base); });
        return SmallVector<Value>();
      }, [&] {
        storeGranulePieces(granule, base, r, Value());
        return SmallVector<Value>();
      });
      Value next = kb.andi(kb.lt(g, kb.idx(7)), kb.lt(kb.add(colBase, kb.idx(15)), kb.idx(K)));
      kb.when(kb.andi(kb.lt(kb.idx(0), r), kb.eq(next, kb.boolean(false))),
              [&] { storeGranulePieces(tail, kb.add(base, kb.idx(8)), Value(), r); });
      return SmallVector<Value>();
    }, [&] {
      kb.when(active, [&] {
        storeLaneCols(gxU, l.arg("gx"), [&](Value c) { return kb.add(kb.mul(s.tok[u], kb.idx(K)), c); });
      });
      return SmallVector<Value>();
    });
  });
}

/// At 4-byte rows: token 2t + u's gx (laneCols = 8 values, f32) by
/// shuffles. Lane g's row starts r = (tok K) % 8 elements past a granule;
/// granule g is lane g - 1's last r values (a shuffle up by 4 lanes) and
/// lane g's first 8 - r, shifted into place by word selects.
void MmaMain::storeGxGranules(StepValues &s, ArrayRef<SmallVector<Value>> gx) {
  Type elem = cast<VectorType>(actVec).getElementType();
  for (int u = 0; u < 2; ++u) {
    Value mine = gxVector(gx[u]);
    SmallVector<Value> words = xWords(kb, mine), before;
    for (Value w : words)
      before.push_back(gpu::ShuffleOp::create(kb.b, kb.loc, w, 4, 32, gpu::ShuffleMode::UP)
                           .getShuffleResult());
    // (The row's offset per step, as measured; granuleOffset is the same
    // for every row stored.)
    Value row = kb.min(s.tok[u], lastRow);
    Value r = kb.rem(kb.mul(kb.rem(row, kb.idx(8)), kb.idx(p.K % 8)), kb.idx(8));
    Value shift = kb.rem(kb.sub(kb.idx(8), r), kb.idx(8)); // elements into the 16 bytes
    Value bit0 = kb.lt(kb.idx(0), kb.andi(shift, kb.idx(2)));
    Value bit1 = kb.lt(kb.idx(0), kb.andi(shift, kb.idx(4)));
    Value half = kb.indexToI32(kb.mul(kb.rem(shift, kb.idx(2)), kb.idx(16)));
    Value aligned = kb.eq(r, kb.idx(0));
    Value first = kb.select(aligned, mine, xFromWords(kb, before, elem));
    SmallVector<Value> granule = xWords(kb, shiftWords(kb, first, mine, bit0, bit1, half));
    Value zeros = kb.vector(SmallVector<Value>(8, kb.toType(zero, elem)));
    SmallVector<Value> tail = xWords(kb, shiftWords(kb, mine, zeros, bit0, bit1, half));
    storeGranules(s, u, gx[u], r, granule, tail);
  }
}

/// At 2-byte rows: token 2t + u's gx (laneCols = 8 values, f32) through
/// the step's stage (its x is read by then): each lane writes its 16
/// bytes to stage row 4u + t (kGxRow words a row, the row's column 0 at
/// word kGxPad), then reads back the aligned granule g of the row: the
/// row's columns 8g - r .. 8g - r + 7 (r: granuleOffset).
void MmaMain::storeGxStaged(StepValues &s, ArrayRef<SmallVector<Value>> gx) {
  auto rowAt = [&](int u) {
    return kb.add(s.base, kb.mul(kb.add(kb.idx(4 * u), t), kb.idx(kGxRow)));
  };
  auto word = [&](Value row, Value i) {
    return LLVM::LoadOp::create(kb.b, kb.loc, kb.b.getI32Type(), kb.sharedPtr(ring, kb.add(row, i)), 4)
        .getResult();
  };
  for (int u = 0; u < 2; ++u) {
    Value mine = vector::BitCastOp::create(kb.b, kb.loc, VectorType::get({4}, kb.b.getI32Type()),
                                           gxVector(gx[u]));
    Value at = kb.add(rowAt(u), kb.add(kb.idx(kGxPad), kb.mul(g, kb.idx(4))));
    LLVM::StoreOp::create(kb.b, kb.loc, mine, kb.sharedPtr(ring, at), 16);
  }
  kb.syncWarp();
  // Granule g's image and the next one's (the row's columns 8g - r .. 8g
  // - r + 15): 9 words from the one holding column 8g - r, funnel-shifted
  // by its half-word. Words before column 0 or past the warp's 64 are not
  // stored (the edges' pieces leave them out).
  std::array<SmallVector<Value>, 2> granule, tail;
  std::array<Value, 2> rs;
  for (int u = 0; u < 2; ++u) {
    Value r = granuleOffset(u);
    rs[u] = r;
    Value bits = kb.indexToI32(kb.mul(kb.rem(r, kb.idx(2)), kb.idx(16)));
    // floor((8g - r) / 2) words past column 0 (8g - r >= -7).
    Value q = kb.add(kb.idx(kGxPad - 4), kb.div(kb.add(kb.sub(kb.mul(g, kb.idx(8)), r), kb.idx(8)), kb.idx(2)));
    SmallVector<Value> w;
    for (int64_t i = 0; i <= 8; ++i)
      w.push_back(word(rowAt(u), kb.add(q, kb.idx(i))));
    for (int64_t i = 0; i < 4; ++i) {
      granule[u].push_back(LLVM::FshrOp::create(kb.b, kb.loc, w[i + 1], w[i], bits));
      tail[u].push_back(LLVM::FshrOp::create(kb.b, kb.loc, w[i + 5], w[i + 4], bits));
    }
  }
  // The stage is refilled at the next step: every lane's reads first.
  kb.syncWarp();
  for (int u = 0; u < 2; ++u)
    storeGranules(s, u, gx[u], rs[u], granule[u], tail[u]);
}
