//===- BackwardWgmmaConsumer.cpp - the wgmma backward's consumers ---------===//
//
// Warpgroups 1 and 2 of launch "main", alternate steps: D = gh phi and
// gphi^T += x^T gh on wgmma, gx = D + (2/K) gms x stored by TMA, and at the
// end each consumer's gphi^T into its partials.
//
//===----------------------------------------------------------------------===//

#include "kernels/project/BackwardWgmma.h"
#include "kernels/project/Fragments.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"

using namespace mlir;
using namespace mlir::mhc;
using namespace mlir::mhc::wgmma;

/// A step's products from stage `at` (gh's image at `img`): D = gh phi
/// (returned) and gphi^T += x^T gh into `acc`; waits for D.
SmallVector<Value> WgmmaMain::products(const WgmmaConsumer &cs, Value at, Value img,
                                       SmallVector<Value> &acc) {
  const int64_t N = p.N, planeBytes = p.planeBytes, cmRow = p.cmRow, phiRow = p.phiRow;
  kb.wgmmaFence();
  // D = gh phi: hi hi, hi lo, lo hi.
  SmallVector<Value> d(64, cs.zero);
  for (int64_t pass = 0; pass < 3; ++pass)
    for (int64_t s = 0; s < N / 16; ++s) {
      Value a = kb.wgmmaDescriptor(
          smem, kb.add(img, kb.idx(((pass == 2) * planeBytes + s * 256) / 4)), 128, cmRow);
      Value b = kb.wgmmaDescriptor(
          smem, kb.add(phiAt, kb.idx(((pass == 1) * p.phiPlane + s * 2 * phiRow) / 4)),
          phiRow, 128);
      kb.wgmmaBf16Shared(d, a, b, /*transA=*/false, /*transB=*/false);
    }
  kb.wgmmaCommit();
  // gphi^T += x^T gh, 16 tokens at a time.
  for (int64_t kk = 0; kk < kTokens / 16; ++kk)
    for (int64_t mt = 0; mt < 2; ++mt)
      for (int64_t part = 0; part < 2; ++part) {
        Value a = kb.wgmmaDescriptorSwizzled(
            smem, kb.add(at, kb.idx((mt * kTile + kk * 2048) / 4)), kTile, 1024);
        Value b = kb.wgmmaDescriptor(
            smem, kb.add(img, kb.idx((part * planeBytes + kk * 2 * cmRow) / 4)), cmRow, 128);
        kb.wgmmaBf16Shared(MutableArrayRef<Value>(acc).slice(mt * N / 2, N / 2), a, b,
                           /*transA=*/true, /*transB=*/true);
      }
  kb.wgmmaCommit();
  kb.wgmmaWait(1); // D
  return d;
}

/// gx = D + (2/K) gms x through swizzled tiles (the x tiles' layout: no
/// bank conflicts), then two tensor stores; the previous step's stores
/// have read the tiles first.
void WgmmaMain::storeGx(const WgmmaConsumer &cs, ArrayRef<Value> d, Value at, Value img,
                        Value m0) {
  Type bf16x2 = VectorType::get({2}, kb.b.getBF16Type());
  kb.when(cs.leader, [&] { kb.bulkWait(0, /*readOnly=*/true); });
  kb.namedBarrier(cs.barrierId, 128);
  for (int64_t h = 0; h < 2; ++h) {
    // Token m = r0 + 8h (m % 8 = g): the 16-byte pieces of its 128-byte
    // rows are permuted by m % 8.
    Value m = kb.add(cs.r0, kb.idx(8 * h));
    Value gm = kb.mul(kb.load(smem, kb.add(img, kb.add(kb.idx(2 * p.planeBytes / 4), m))),
                      cs.twoOverK);
    for (int64_t i8 = 0; i8 < 16; ++i8) {
      Value chunk = arith::XOrIOp::create(kb.b, kb.loc, kb.idx(i8 % 8), cs.g);
      Value byte = kb.add(kb.add(kb.idx(i8 / 8 * kTile), kb.mul(m, kb.idx(128))),
                          kb.add(kb.mul(chunk, kb.idx(16)), kb.mul(cs.t, kb.idx(4))));
      Value f = kb.div(byte, kb.idx(4));
      Value xv = kb.toF32(LLVM::LoadOp::create(kb.b, kb.loc, bf16x2,
                                               kb.sharedPtr(smem, kb.add(at, f)), 4));
      Value v0 = kb.fma(gm, kb.extract(xv, 0), d[4 * i8 + 2 * h]);
      Value v1 = kb.fma(gm, kb.extract(xv, 1), d[4 * i8 + 2 * h + 1]);
      Value o = kb.vector({kb.toType(v0, kb.b.getBF16Type()),
                           kb.toType(v1, kb.b.getBF16Type())});
      LLVM::StoreOp::create(kb.b, kb.loc, o, kb.sharedPtr(smem, kb.add(cs.out, f)), 4);
    }
  }
  kb.fenceProxyAsyncShared();
  kb.namedBarrier(cs.barrierId, 128);
  kb.when(cs.leader, [&] {
    for (int64_t tile = 0; tile < 2; ++tile)
      kb.tensorStore2d(l.arg("tmap:gx"), kb.sharedPtr(smem, kb.add(cs.out, kb.idx(tile * kTile / 4))),
                       kb.indexToI32(kb.add(colBase, kb.idx(64 * tile))),
                       kb.indexToI32(m0));
    kb.bulkCommit();
  });
}

/// Each consumer's gphi^T goes to partials of its own (share, c):
/// gphi[j][colBase + col] from accumulator q of m-tile mt, pairs of
/// columns of gphi^T being pairs of rows j, j + 1 of gphi.
void WgmmaMain::storePartials(const WgmmaConsumer &cs, ArrayRef<Value> total) {
  const int64_t N = p.N, K = p.K;
  Value base = kb.mul(kb.add(kb.mul(share, kb.idx(2)), cs.c), kb.idx(N * K));
  for (int64_t mt = 0; mt < 2; ++mt)
    for (int64_t q = 0; q < N / 2; ++q) {
      Value col = kb.add(kb.idx(64 * mt + 8 * ((q / 2) % 2)), cs.r0);
      Value j = kb.add(kb.idx(8 * (q / 4) + q % 2), kb.mul(cs.t, kb.idx(2)));
      kb.store(total[mt * N / 2 + q], l.arg("partials"),
               kb.add(base, kb.add(kb.mul(j, kb.idx(K)), kb.add(colBase, col))));
    }
}

/// Consumers: warpgroups 1 and 2, steps c, c + 2, ...
void WgmmaMain::consume() {
  kb.setMaxRegisters(232, /*increase=*/true);
  WgmmaConsumer cs = consumerValues();
  // Accumulator i of a m64nN fragment: row 16w + g + 8((i / 2) % 2),
  // column 8(i / 4) + 2t + i % 2.
  SmallVector<Value> init(p.N, cs.zero); // gphi^T, two 64-column m-tiles
  SmallVector<Value> total = kb.loop(
      cs.c, count, kb.idx(2), init, [&](Value i, ValueRange it) {
        SmallVector<Value> acc(it.begin(), it.end());
        Value at = stageAt(ring.wait(i));
        Value img = kb.add(at, kb.idx(2 * kTile / 4));
        Value m0 = kb.mul(kb.add(s0, i), kb.idx(kTokens));
        SmallVector<Value> d = products(cs, at, img, acc);
        storeGx(cs, d, at, img, m0);
        kb.wgmmaWait(0); // gphi: the stage is free
        ring.release(i, cs.lane);
        return acc;
      });
  kb.when(cs.leader, [&] { kb.bulkWait(0, /*readOnly=*/false); });
  storePartials(cs, total);
}
