//===- BackwardMmaWords.cpp - the per-warp ring at 2-byte rows ------------===//
//
// x and gx at 2- and 4-byte rows (docs/design/project.md, "Any K") in the
// mma.sync backward's per-warp ring: x as 4-byte words (cp.async has no
// 2-byte copy), a row's per request (rowWords) or the aligned words that
// hold a lane's columns (wordCopy), read back shifted by the row's
// half-word at odd K; there gx, where not in granules
// (BackwardMmaGxGranules.cpp), in aligned words where the lane's columns
// lie inside K, a 2-byte store at each end of the odd rows.
//
//===----------------------------------------------------------------------===//

#include "kernels/project/BackwardMmaMain.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;
using namespace mlir::mhc;

/// wordCopy: word w of the lane's slot u, word-major ([u][w][lane]), so
/// that a warp's copies and reads of one word hit 32 consecutive banks (a
/// lane-major slot of laneCols words was an 8-way conflict: the L1 bound).
Value MmaMain::wordSlot(Value base, int u, int64_t w) {
  return kb.add(base, kb.add(kb.idx((u * (p.laneCols / 2 + 1) + w) * 32), lane));
}

/// wordCopy: the lane's columns of x row `row` (element xOff, the lane's
/// first column) as the laneCols / 2 + 1 aligned words from the one at or
/// below xOff, into slot u of the lane. A word past the row's end, or every
/// word where !ok, is zero-filled (every word copied holds a byte of x).
void MmaMain::copyXWords(Value base, int u, Value xOff, Value row, Value ok) {
  Value first = kb.sub(xOff, kb.rem(xOff, kb.idx(2)));
  Value rowEnd = kb.mul(kb.add(row, kb.idx(1)), kb.idx(p.K));
  for (int64_t w = 0; w <= p.laneCols / 2; ++w) {
    Value src = kb.add(first, kb.idx(2 * w));
    copyWordIf(wordSlot(base, u, w), src, kb.andi(ok, kb.lt(src, rowEnd)));
  }
}

/// wordCopy: the lane's laneCols x values of slot u (row `row`, clamped)
/// as f32, the words shifted by 16 bits where the row starts at an odd
/// element (K odd, the lane's first column even); zeros at columns past K.
SmallVector<Value> MmaMain::readXWords(Value base, int u, Value row) {
  SmallVector<Value> words;
  for (int64_t w = 0; w <= p.laneCols / 2; ++w)
    words.push_back(LLVM::LoadOp::create(kb.b, kb.loc, kb.b.getI32Type(),
                                         kb.sharedPtr(ring, wordSlot(base, u, w)), 4));
  return wordsToX(words, row);
}

/// The lane's laneCols values from the words that hold them (one more at
/// 2-byte rows, shifted by the row's half-word), zeros past K where masked.
SmallVector<Value> MmaMain::wordsToX(ArrayRef<Value> words, Value row) {
  Value bits = p.wordCopy ? kb.indexToI32(kb.mul(kb.rem(row, kb.idx(2)), kb.idx(16))) : Value();
  Type pair = VectorType::get({2}, cast<VectorType>(actVec).getElementType());
  SmallVector<Value> out;
  for (int64_t w = 0; w < p.laneCols / 2; ++w) {
    Value word = bits ? LLVM::FshrOp::create(kb.b, kb.loc, words[w + 1], words[w], bits)
                      : words[w];
    Value f = kb.toF32(vector::BitCastOp::create(kb.b, kb.loc, pair, kb.vector({word})));
    for (int64_t e = 0; e < 2; ++e) {
      Value v = kb.extract(f, e);
      out.push_back(masked() ? kb.select(colsIn(2 * w + e), v, zero) : v);
    }
  }
  return out;
}

/// A 4-byte cp.async of x's element src to stage float dst, zeros where !in.
void MmaMain::copyWordIf(Value dst, Value src, Value in) {
  kb.copyAsync(kb.sharedPtr(ring, dst), kb.globalPtr(l.arg("x"), kb.select(in, src, kb.idx(0))), 4,
               kb.select(in, kb.i32(4), kb.i32(0)));
}

/// rowWords: the word of row m0 + c (clamped where `partial`) that starts
/// at column col - par of the row, par = 1 where the row starts a half-word
/// past a word (odd K, odd row), into stage float `dst`. Zero-filled past
/// the row's end, and in a partial step for tokens past M.
void MmaMain::copyRowWord(Value dst, Value m0, Value c, Value col, bool partial) {
  const int64_t K = p.K;
  Value tok = kb.add(m0, c), row = partial ? kb.min(tok, lastRow) : tok;
  // In a full step m0 % 8 == 0, so m0 K is even and the parity is c K's.
  Value par = p.wordCopy ? kb.rem(kb.mul(partial ? row : c, kb.idx(K)), kb.idx(2)) : kb.idx(0);
  Value src = kb.add(kb.sub(kb.mul(row, kb.idx(K)), par), col);
  Value ok = kb.lt(col, kb.add(kb.idx(K), par));
  if (partial)
    ok = kb.andi(ok, kb.lt(tok, M));
  copyWordIf(dst, src, ok);
}

/// rowWords: the step's 8 rows, lane j copying word j of each; stage row r
/// = 4u + t holds token m0 + 2t + u. At 2-byte rows lanes 0..7 then copy
/// word 32 of stage row `lane` (a lane's 8 columns span 5 words there).
void MmaMain::copyRowWords(Value base, Value m0, bool partial) {
  for (int64_t r = 0; r < 8; ++r)
    copyRowWord(kb.add(base, kb.add(kb.idx(r * kRowWords), lane)), m0,
                kb.idx(2 * (r % 4) + r / 4), rowWordCol, partial);
  if (!p.wordCopy)
    return;
  kb.when(kb.lt(lane, kb.idx(8)), [&] {
    Value c = kb.add(kb.mul(kb.rem(lane, kb.idx(4)), kb.idx(2)), kb.div(lane, kb.idx(4)));
    Value col = kb.add(kb.sub(rowWordCol, kb.mul(lane, kb.idx(2))), kb.idx(2 * (kRowWords - 1)));
    copyRowWord(kb.add(base, kb.add(kb.mul(lane, kb.idx(kRowWords)), kb.idx(kRowWords - 1))), m0, c,
                col, partial);
  });
}

/// rowWords: the lane's laneCols values of token 2t + u's row (`row`,
/// clamped), words 4g .. 4g + 3 of stage row 4u + t (and 4g + 4 at 2-byte
/// rows, shifted by the row's half-word).
SmallVector<Value> MmaMain::readRowWords(Value base, int u, Value row) {
  Value first = kb.add(base, kb.add(kb.mul(kb.add(kb.idx(4 * u), t), kb.idx(kRowWords)),
                                    kb.mul(g, kb.idx(4))));
  SmallVector<Value> words;
  for (int64_t w = 0; w < (p.wordCopy ? 5 : 4); ++w)
    words.push_back(LLVM::LoadOp::create(kb.b, kb.loc, kb.b.getI32Type(),
                                         kb.sharedPtr(ring, kb.add(first, kb.idx(w))), 4));
  return wordsToX(words, row);
}

/// wordCopy: token 2t + u's gx (laneCols values, f32) where its row is
/// below M. A lane whose columns all lie before K stores aligned pairs: the
/// step's tokens m0 + 2t + u start at an element of parity u (m0 % 8 == 0,
/// K odd, col0 even), so the odd rows store their first and last value
/// alone. The lane that crosses K stores element by element.
void MmaMain::storeGxWords(StepValues &s, ArrayRef<SmallVector<Value>> gx) {
  Type elem = cast<VectorType>(actVec).getElementType();
  Value mem = l.arg("gx");
  for (int u = 0; u < 2; ++u)
    kb.when(kb.andi(active, s.tokOk[u]), [&] {
      Value row = kb.mul(s.tok[u], kb.idx(p.K));
      auto at = [&](Value c) { return kb.add(row, c); };
      kb.ifElse(colsIn(p.laneCols - 1), [&] {
        kb.withAccessLimit(4, [&] {
          for (int64_t i = 0; i < p.laneCols;) {
            int64_t width = (u == 1 && (i == 0 || i == p.laneCols - 1)) ? 1 : 2;
            SmallVector<Value> vals;
            for (int64_t e = 0; e < width; ++e)
              vals.push_back(kb.toType(gx[u][i + e], elem));
            kb.vstore(kb.vector(vals), mem, at(kb.add(col0, kb.idx(i))));
            i += width;
          }
        });
        return SmallVector<Value>();
      }, [&] {
        storeLaneCols(gx[u], mem, at);
        return SmallVector<Value>();
      });
    });
}
