//===- BackwardWidePad.cpp - the one-wave backward's launch "pad" ---------===//
//
// Launch "pad" (a block per pair of steps) writes each 16-token step's
// image of gh: the f16 plane of gh scaled per token, bf16 hi and lo parts
// of gh (gphi's B, as in the wgmma kernel), gms and the token's scale back
// (2^-e), as core matrices of 8 tokens x 8 rows of gh (16-byte token
// rows). Block 0 also zeroes the main launch's pacing counter.
//
//===----------------------------------------------------------------------===//

#include "builder/WavePacer.h"
#include "kernels/project/BackwardWide.h"
#include "kernels/project/Fragments.h"

using namespace mlir;
using namespace mlir::mhc;
using namespace mlir::mhc::wide;

namespace {

/// Launch "pad", a block per pair of steps: gh's 32 rows read coalesced
/// into shared memory (rows padded to N + 1 floats: no bank conflicts), the
/// two images built there, then written out in 16-byte pieces (they are
/// adjacent in ghp).
class WidePad {
public:
  WidePad(KernelContext &ctx, const WidePlan &p);
  void emit();

private:
  Value imageAt(Value tok);
  Value tokenOf(Value row);
  void loadRows();
  void tokenScales();
  void writeWords();

  const WidePlan &p;
  const int64_t rowF, imgAt, scalesAt; // floats in shared memory
  LaunchBuilder &l;
  KernelBuilder kb;
  Value M, bid, tid, sm, zero, first;
};

LaunchBuilder &padLaunch(KernelContext &ctx, int64_t scalesAt) {
  LaunchBuilder &l = ctx.launch("pad");
  l.param("gh").param("gms").param("ghp").param("progress").param("M").block(256)
      .grid({2 * kRows, 0}).sharedF32(scalesAt + 2 * kRows, 16);
  return l;
}

WidePad::WidePad(KernelContext &ctx, const WidePlan &p)
    : p(p), rowF(p.N + 1), imgAt(2 * kRows * rowF), scalesAt(imgAt + 2 * p.imageFloats),
      l(padLaunch(ctx, scalesAt)), kb(ctx.begin(l)) {}

Value WidePad::imageAt(Value tok) { // floats: token tok's step image in sm
  return kb.add(kb.idx(imgAt), kb.mul(kb.div(tok, kb.idx(kRows)), kb.idx(p.imageFloats)));
}

/// Token `row` of the pair's image (32 rows: the main launch's box rows,
/// stepToken's order).
Value WidePad::tokenOf(Value row) {
  Value step = kb.mul(kb.div(row, kb.idx(kRows)), kb.idx(kRows));
  return kb.add(first, kb.add(step, stepToken(kb, p, kb.rem(row, kb.idx(kRows)))));
}

/// The pair's rows of gh in the image's order, 0 past M.
void WidePad::loadRows() {
  const int64_t N = p.N;
  kb.loop(tid, kb.idx(2 * kRows * N), kb.idx(256), [&](Value e) {
    Value row = kb.div(e, kb.idx(N)), j = kb.rem(e, kb.idx(N)), tok = tokenOf(row);
    Value g = kb.load(l.arg("gh"), kb.add(kb.mul(kb.min(tok, kb.sub(M, kb.idx(1))), kb.idx(N)), j));
    kb.store(kb.select(kb.lt(tok, M), g, zero), sm, kb.add(kb.mul(row, kb.idx(rowF)), j));
  });
}

/// The token's scale: 8 threads per token, N / 8 values each; the scale
/// goes to scalesAt, gms and the scale back into the token's image.
void WidePad::tokenScales() {
  const int64_t N = p.N;
  Value tok = kb.div(tid, kb.idx(8)), part = kb.rem(tid, kb.idx(8));
  Value r = tokenOf(tok);
  Value mag = kb.i32(0);
  for (int64_t q = 0; q < N / 8; ++q)
    mag = kb.max(mag, magnitudeBits(kb, kb.load(sm, kb.add(kb.mul(tok, kb.idx(rowF)),
                                                          kb.add(kb.mul(part, kb.idx(N / 8)), kb.idx(q))))));
  auto [scale, back] = f16Scale(kb, laneGroupMax(kb, mag, 8));
  kb.when(kb.eq(part, kb.idx(0)), [&] {
    Value at = kb.add(imageAt(tok), kb.rem(tok, kb.idx(kRows)));
    kb.store(scale, sm, kb.add(kb.idx(scalesAt), tok));
    kb.store(back, sm, kb.add(at, kb.idx((p.plane + p.backAt) / 4)));
    Value g = kb.load(l.arg("gms"), kb.min(r, kb.sub(M, kb.idx(1))));
    kb.store(kb.select(kb.lt(r, M), g, zero), sm, kb.add(at, kb.idx((p.plane + p.gmsAt) / 4)));
  });
}

/// A word (two rows of gh) per item and part: f16 of the scaled values,
/// bf16 hi and lo parts of the values; a warp takes 32 tokens of one pair
/// of rows.
void WidePad::writeWords() {
  const int64_t N = p.N;
  kb.loop(tid, kb.idx(2 * kRows * N / 2), kb.idx(256), [&](Value e) {
    Value tok = kb.rem(e, kb.idx(2 * kRows)), j = kb.mul(kb.div(e, kb.idx(2 * kRows)), kb.idx(2));
    Value row = kb.mul(tok, kb.idx(rowF));
    Value g0 = kb.load(sm, kb.add(row, j)), g1 = kb.load(sm, kb.add(row, kb.add(j, kb.idx(1))));
    Value scale = kb.load(sm, kb.add(kb.idx(scalesAt), tok));
    SmallVector<Value> words = {packF16x2(kb, kb.mul(g0, scale), kb.mul(g1, scale))};
    words.append(bf16PartWords(kb, g0, g1));
    Value to = kb.add(imageAt(tok),
                      kb.div(coreMatrixByte(kb, kb.rem(tok, kb.idx(kRows)), j, p.cmRow, 128), kb.idx(4)));
    for (int64_t part = 0; part < 3; ++part)
      kb.store(words[part], sm, kb.add(to, kb.idx(part * p.plane / 4)));
  });
}

void WidePad::emit() {
  M = l.tokens(), bid = kb.blockId(), tid = kb.threadId();
  sm = l.shared(0);
  kb.when(kb.eq(bid, kb.idx(0)), [&] { WavePacer::clear(kb, l.arg("progress"), 1, 256); });
  zero = kb.f32(0.0);
  first = kb.mul(bid, kb.idx(2 * kRows));
  loadRows();
  kb.barrier();
  tokenScales();
  kb.barrier();
  writeWords();
  kb.barrier();
  Value out = kb.mul(bid, kb.idx(2 * p.imageFloats));
  kb.loop(kb.mul(tid, kb.idx(4)), kb.idx(2 * p.imageFloats), kb.idx(4 * 256), [&](Value e) {
    kb.vstore(kb.vload(sm, kb.add(kb.idx(imgAt), e), 4), l.arg("ghp"), kb.add(out, e));
  });
}

} // namespace

void wide::emitWidePad(KernelContext &ctx, const WidePlan &p) { WidePad(ctx, p).emit(); }
