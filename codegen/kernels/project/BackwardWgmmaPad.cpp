//===- BackwardWgmmaPad.cpp - the wgmma backward's launch "pad" -----------===//
//
// Each 64-token step's gh as one image that the main launch's producer
// moves into shared memory with a single bulk copy (BackwardWgmma.cpp has
// the layout), and the main launch's pacing counters zeroed.
//
//===----------------------------------------------------------------------===//

#include "builder/WavePacer.h"
#include "kernels/project/BackwardWgmma.h"
#include "kernels/project/Fragments.h"

using namespace mlir;
using namespace mlir::mhc;

void mlir::mhc::wgmma::buildPadLaunch(KernelContext &ctx, const WgmmaPlan &p) {
  const int64_t N = p.N, planeBytes = p.planeBytes, imageFloats = p.imageFloats;
  LaunchBuilder &l = ctx.launch("pad");
  l.param("gh").param("gms").param("ghp").param("progress").param("M").block(256)
      .grid({kTokens, 0});
  KernelBuilder kb = ctx.begin(l);
  Value M = l.tokens(), bid = kb.blockId();
  kb.when(kb.eq(bid, kb.idx(0)), [&] { // the main launch's pacing counters
    WavePacer::clear(kb, l.arg("progress"), p.waves, 256);
  });
  Value zero = kb.f32(0.0);
  Value last = kb.sub(M, kb.idx(1)), image = kb.mul(bid, kb.idx(imageFloats));
  auto ghAt = [&](Value r, Value j) { // gh[r][j], 0 past M
    Value g = kb.load(l.arg("gh"), kb.add(kb.mul(kb.min(r, last), kb.idx(N)), j));
    return kb.select(kb.lt(r, M), g, zero);
  };
  // A word (two rows of gh) per item and part.
  kb.loop(kb.threadId(), kb.idx(kTokens * N / 2), kb.idx(256), [&](Value e) {
    Value tok = kb.div(e, kb.idx(N / 2)), j = kb.mul(kb.rem(e, kb.idx(N / 2)), kb.idx(2));
    Value r = kb.add(kb.mul(bid, kb.idx(kTokens)), tok);
    SmallVector<Value> words = bf16PartWords(kb, ghAt(r, j), ghAt(r, kb.add(j, kb.idx(1))));
    Value at = kb.add(image, kb.div(coreMatrixByte(kb, tok, j, p.cmRow, 128), kb.idx(4)));
    for (int64_t part = 0; part < 2; ++part)
      kb.store(words[part], l.arg("ghp"), kb.add(at, kb.idx(part * planeBytes / 4)));
  });
  kb.loop(kb.threadId(), kb.idx(kTokens), kb.idx(256), [&](Value tok) {
    Value r = kb.add(kb.mul(bid, kb.idx(kTokens)), tok);
    Value s = kb.select(kb.lt(r, M), kb.load(l.arg("gms"), kb.min(r, last)), zero);
    kb.store(s, l.arg("ghp"), kb.add(image, kb.add(kb.idx(2 * planeBytes / 4), tok)));
  });
}
