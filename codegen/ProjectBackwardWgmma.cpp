//===- ProjectBackwardWgmma.cpp - n = 8 projection backward on wgmma ------===//
//
// gx = gh phi + (2/K) gms x and gphi = gh^T x for bf16 x, tf32 mode, no
// weight, on sm_90a, where the mma.sync kernel (ProjectKernels.cpp) is
// bound by the tensor issue and its per-step structure (n = 8: 80 mixing
// rows per token, 38% of the copy bandwidth at M = 32768, C = 7168).
//
// Launch "pad" writes each 64-token step's gh as one image that a single
// bulk copy moves into shared memory: [64][N + 4] f32 rows, gh rounded to
// tf32 (gms in column N) for D's A, and gh's bf16 hi and lo parts as
// [64][N + 8] planes for gphi's A; the row lengths put the eight rows of
// each ldmatrix on distinct banks.
//
// Launch "main": a block per (128 columns, token share), one per SM.
// Warpgroup 0 gives its registers up (setmaxnreg) and its thread 0 fills
// a ring of stages (two for n = 8, three for n = 6): per step, the two 64-column x tiles by TMA tensor
// copies (128-byte rows, 128-byte swizzle) and the gh image by one bulk
// copy, all completing on the stage's "full" mbarrier. Warpgroups 1 and 2
// (64 columns each) wait on it and release the stage on its "empty"
// mbarrier; no block barrier in the loop. Per step:
//   D [64 tokens x 64 columns] = gh phi: tf32 wgmma m64n64k8, N/8 k-steps,
//     A = gh's rows by ldmatrix, B = phi^T resident in shared memory
//     (written once per block, K-major core matrices);
//   gphi [N x 64 columns] += gh^T x: bf16 wgmma m64n64k16 over 16 tokens,
//     A = gh^T's hi and lo parts by transposing ldmatrix (2^-17 of gh,
//     finer than tf32; x is exact in bf16), B = the x tile as TMA wrote it
//     (N-major, transpose-B, swizzled descriptor); two k-steps per group;
//   gx = D + (2/K) gms x into a swizzled tile in shared memory, stored by
//     one TMA tensor store (rows past M dropped).
// gphi's partial sums per token share go to [shares, N, K], summed in order
// by the "partials_final" launch: deterministic.
//
// H100, n = 8, M = 32768, C = 7168, main launch: 3654 us against 6445 us
// for the mma.sync kernel (M = 8192, C = 4096: 524 against 921 us). What
// each part costs, from the same kernel in CUDA C without it: the loads
// and products alone 2.27 ms, the loads and gx stores alone 2.88 ms; the
// fragments by shared loads and conversions instead of ldmatrix 4.05 ms;
// scattered 4-byte gx stores from the accumulators 5.6 ms, gms read from
// global memory in the store path 5.6 -> 4.3 ms, x boxes of 16-byte rows
// 6.7 ms, x copied by a producer warp with cp.async 5.3 ms.
//
//===----------------------------------------------------------------------===//

#include "Families.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"

using namespace mlir;
using namespace mlir::mhc;
using ::mhc::BufferRole;
using ::mhc::DType;

namespace {

constexpr int64_t kTokens = 64;     // tokens per step (wgmma's M)
constexpr int64_t kCols = 128;      // columns per block, 64 per consumer
constexpr int64_t kMaxStages = 4;   // ring depth: as many as shared memory holds
constexpr int64_t kOutTiles = 4;    // gx tiles per consumer in flight
constexpr int64_t kTile = 8192;     // bytes of a [64][64] bf16 tile
constexpr int64_t kAlign = 1024;    // the swizzle's period in shared memory

} // namespace

bool mlir::mhc::projectBackwardIsWgmma(const KernelContext &ctx) {
  const ::mhc::KernelSpec &s = ctx.spec;
  // n = 6 and 8 (N = 48, 80): N a multiple of 8 (D's k-steps), and the
  // registers (D 32, gphi 32 per 64-row tile, D's A N/2) fit; the row
  // lengths below keep ldmatrix's rows on distinct banks for both.
  return s.arch == "sm_90a" && s.tf32 && s.act == DType::BF16 &&
         !s.hasWeight && (s.n == 6 || s.n == 8) && ctx.K() % kCols == 0;
}

LogicalResult mlir::mhc::buildProjectBackwardWgmma(KernelContext &ctx) {
  const int64_t N = ctx.N(), K = ctx.K();
  // A step's gh image (the pad launch): [64][R] f32 rows (gh rounded to
  // tf32, gms in column N) for D's A, then gh's bf16 hi and lo parts as
  // [64][P] planes for gphi's A (read transposed by ldmatrix). Rows of R =
  // N + 4 floats (84 and 52: 20 words mod 32) and P = N + 8 bf16 (44 and
  // 28 words) put the eight rows of an ldmatrix on distinct banks; the
  // stage stays a multiple of 1024 bytes (R + P = 0 mod 4).
  const int64_t R = N + 4, P = N + 8;
  const int64_t kSteps = N / 8;            // D's k-steps
  const int64_t mTiles = (N + 63) / 64;    // gphi's 64-row tiles
  const int64_t rowsBytes = kTokens * R * 4, planeBytes = kTokens * P * 2;
  const int64_t ghBytes = rowsBytes + 2 * planeBytes;
  const int64_t stepFloats = ghBytes / 4;
  const int64_t stageBytes = 2 * kTile + ghBytes;
  const int64_t phiBytes = 2 * N * 64 * 4; // phi^T per consumer: N x 64 tf32
  const int64_t outBytes = 2 * kOutTiles * kTile;
  int64_t kStages = kMaxStages;
  while (kStages > 2 && kAlign + phiBytes + kStages * stageBytes + outBytes + 16 * kStages >
                            LaunchBuilder::sharedLimit(ctx.spec.arch))
    --kStages;
  const int64_t slices = K / kCols;
  const int64_t shares = tokenShares(double(ctx.smCount()), slices,
                                     2.0 * 32768 * K * 2, N * K);

  ctx.buffer("gh", DType::F32, BufferRole::Input, {N, 0});
  ctx.buffer("gms", DType::F32, BufferRole::Input, {1, 0});
  ctx.buffer("x", DType::BF16, BufferRole::Input, {K, 0});
  ctx.buffer("phi", ctx.spec.param, BufferRole::Input, {0, N * K});
  ctx.buffer("gx", DType::BF16, BufferRole::Output, {K, 0});
  ctx.buffer("gphi", ctx.spec.param, BufferRole::Output, {0, N * K});
  ctx.buffer("ghp", DType::F32, BufferRole::Workspace,
             {stepFloats / kTokens, (kTokens - 1) * stepFloats / kTokens});
  ctx.buffer("partials", DType::F32, BufferRole::Workspace, {0, shares * N * K});

  {
    LaunchBuilder &l = ctx.launch("pad");
    l.param("gh").param("gms").param("ghp").param("M").block(256).grid({kTokens, 0});
    KernelBuilder kb = ctx.begin(l);
    Value M = l.tokens(), bid = kb.blockId();
    Value zero = kb.f32(0.0);
    Value last = kb.sub(M, kb.idx(1)), image = kb.mul(bid, kb.idx(stepFloats));
    auto ghAt = [&](Value r, Value j) { // gh[r][j], 0 past M or N
      Value g = kb.load(l.arg("gh"), kb.add(kb.mul(kb.min(r, last), kb.idx(N)),
                                            kb.min(j, kb.idx(N - 1))));
      return kb.select(kb.andi(kb.lt(r, M), kb.lt(j, kb.idx(N))), g, zero);
    };
    kb.loop(kb.threadId(), kb.idx(kTokens * R), kb.idx(256), [&](Value e) {
      Value r = kb.add(kb.mul(bid, kb.idx(kTokens)), kb.div(e, kb.idx(R)));
      Value j = kb.rem(e, kb.idx(R));
      Value s = kb.select(kb.lt(r, M), kb.load(l.arg("gms"), kb.min(r, last)), zero);
      Value v = kb.select(kb.lt(j, kb.idx(N)), roundTf32(kb, ghAt(r, j)),
                          kb.select(kb.eq(j, kb.idx(N)), s, zero));
      kb.store(v, l.arg("ghp"), kb.add(image, e));
    });
    // The planes, a word (two columns) per item.
    kb.loop(kb.threadId(), kb.idx(kTokens * P / 2), kb.idx(256), [&](Value e) {
      Value r = kb.add(kb.mul(bid, kb.idx(kTokens)), kb.div(e, kb.idx(P / 2)));
      Value j = kb.mul(kb.rem(e, kb.idx(P / 2)), kb.idx(2));
      SmallVector<Value> p0 = bf16Parts(kb, ghAt(r, j), Value(), kb.boolean(true), 2);
      SmallVector<Value> p1 = bf16Parts(kb, ghAt(r, kb.add(j, kb.idx(1))), Value(), kb.boolean(true), 2);
      for (int64_t part = 0; part < 2; ++part) {
        Value word = arith::BitcastOp::create(kb.b, kb.loc, kb.b.getF32Type(),
                                              kb.packBf16x2(p0[part], p1[part]));
        kb.store(word, l.arg("ghp"),
                 kb.add(image, kb.add(kb.idx((rowsBytes + part * planeBytes) / 4), e)));
      }
    });
  }

  {
    LaunchBuilder &l = ctx.launch("main");
    l.param("tmap:x").param("tmap:gx").param("ghp").param("phi").param("partials")
        .param("M").block(384).grid({0, slices * shares})
        .sharedF32((kAlign + phiBytes + kStages * stageBytes + outBytes) / 4, 128)
        .sharedI64(2 * kStages)
        .minBlocksPerSM(1);
    KernelBuilder kb = ctx.begin(l);
    Value M = l.tokens();
    Value tid = kb.threadId(), bid = kb.blockId();
    Value smem = l.shared(0);
    BulkRing ring(kb, l.shared(1), kStages, 8);
    Value slice = kb.rem(bid, kb.idx(slices)), share = kb.div(bid, kb.idx(slices));
    Value colBase = kb.mul(slice, kb.idx(kCols));
    Value steps = kb.div(kb.add(M, kb.idx(kTokens - 1)), kb.idx(kTokens));
    Value per = kb.div(kb.add(steps, kb.idx(shares - 1)), kb.idx(shares));
    Value s0 = kb.min(kb.mul(share, per), steps);
    Value count = kb.sub(kb.min(kb.add(s0, per), steps), s0);

    // Float index of the first 1024-byte boundary in the buffer: the
    // swizzled tiles' pattern follows the shared address.
    Value addr = LLVM::PtrToIntOp::create(kb.b, kb.loc, kb.b.getI64Type(),
                                          kb.sharedPtr(smem, kb.idx(0)));
    Value addrIdx = arith::IndexCastOp::create(kb.b, kb.loc, kb.b.getIndexType(), addr);
    Value lead = kb.rem(kb.sub(kb.idx(kAlign), kb.rem(addrIdx, kb.idx(kAlign))),
                        kb.idx(kAlign));
    Value phiAt = kb.div(lead, kb.idx(4)); // floats
    auto stageAt = [&](Value st) {         // floats
      return kb.add(phiAt, kb.add(kb.idx(phiBytes / 4), kb.mul(st, kb.idx(stageBytes / 4))));
    };
    Value outAt = kb.add(phiAt, kb.idx((phiBytes + kStages * stageBytes) / 4));

    // phi^T, tf32-rounded, consumer c's (column cc, row j) at byte
    // c*N*256 + (j/8)*2048 + (cc/8)*256 + ((j%8)/4)*128 + (cc%8)*16 + (j%4)*4:
    // per k-step of 8 rows, 64 columns of K-major core matrices.
    kb.loop(tid, kb.idx(N * kCols), kb.idx(384), [&](Value e) {
      Value j = kb.div(e, kb.idx(kCols)), col = kb.rem(e, kb.idx(kCols));
      Value c = kb.div(col, kb.idx(64)), cc = kb.rem(col, kb.idx(64));
      Value byte = kb.add(
          kb.add(kb.mul(c, kb.idx(N * 256)), kb.mul(kb.div(j, kb.idx(8)), kb.idx(2048))),
          kb.add(kb.add(kb.mul(kb.div(cc, kb.idx(8)), kb.idx(256)),
                        kb.mul(kb.div(kb.rem(j, kb.idx(8)), kb.idx(4)), kb.idx(128))),
                 kb.add(kb.mul(kb.rem(cc, kb.idx(8)), kb.idx(16)),
                        kb.mul(kb.rem(j, kb.idx(4)), kb.idx(4)))));
      Value v = kb.toF32(kb.load(l.arg("phi"), kb.add(kb.mul(j, kb.idx(K)), kb.add(colBase, col))));
      kb.store(roundTf32(kb, v), smem, kb.add(phiAt, kb.div(byte, kb.idx(4))));
    });
    kb.fenceProxyAsyncShared(); // the products read phi^T through the async proxy
    ring.init(); // the mbarriers, then every thread past the phi^T writes

    Value wg = kb.div(tid, kb.idx(128));
    // Producer: thread 0 of warpgroup 0.
    kb.when(kb.eq(wg, kb.idx(0)), [&] {
      kb.setMaxRegisters(40, /*increase=*/false);
      kb.when(kb.eq(tid, kb.idx(0)), [&] {
        kb.loop(kb.idx(0), count, kb.idx(1), [&](Value i) {
          ring.produce(i, [&](Value st) {
            Value at = stageAt(st), bar = ring.full(st);
            Value m0 = kb.mul(kb.add(s0, i), kb.idx(kTokens));
            kb.mbarrierArriveExpectTx(bar, stageBytes);
            for (int64_t c = 0; c < 2; ++c)
              kb.tensorLoad2d(kb.sharedPtr(smem, kb.add(at, kb.idx(c * kTile / 4))),
                              l.arg("tmap:x"),
                              kb.indexToI32(kb.add(colBase, kb.idx(64 * c))),
                              kb.indexToI32(m0), bar);
            kb.bulkCopy(kb.sharedPtr(smem, kb.add(at, kb.idx(2 * kTile / 4))),
                        kb.globalPtr(l.arg("ghp"), kb.mul(kb.add(s0, i), kb.idx(stepFloats))), ghBytes, bar);
          });
        });
      });
    });

    // Consumers: warpgroups 1 and 2.
    kb.when(kb.lt(kb.idx(0), wg), [&] {
      kb.setMaxRegisters(232, /*increase=*/true);
      Value c = kb.sub(wg, kb.idx(1)), ct = kb.rem(tid, kb.idx(128));
      Value w = kb.div(ct, kb.idx(32)), lane = kb.rem(ct, kb.idx(32));
      Value g = kb.div(lane, kb.idx(4)), t = kb.rem(lane, kb.idx(4));
      Value r0 = kb.add(kb.mul(w, kb.idx(16)), g);
      Value myPhi = kb.add(phiAt, kb.mul(c, kb.idx(N * 64)));
      Value zero = kb.f32(0.0);
      Value twoOverK = kb.f32(2.0 / static_cast<double>(K));
      Value leader = kb.eq(ct, kb.idx(0));
      Type bf16x2 = VectorType::get({2}, kb.b.getBF16Type());
      Value colC = kb.add(colBase, kb.mul(c, kb.idx(64)));
      Value barrierId = kb.indexToI32(wg); // 1 or 2: this warpgroup's barrier
      // ldmatrix addressing, the same every step: lane l gives row l % 8 of
      // matrix l / 8. D's A: the warp's tokens 16w + 8 ((l >> 3) & 1) +
      // (l & 7), columns 8s + 4 (l >> 4) (floats past the step's rows).
      // gphi's A (planes, transposed): tokens 16kk + 8 (l >> 4) + (l & 7),
      // columns 64mt + 16w + 8 ((l >> 3) & 1), clamped so that rows past N
      // repeat valid rows (their products are dropped).
      Value lane8 = kb.rem(lane, kb.idx(8)), half = kb.rem(kb.div(lane, kb.idx(8)), kb.idx(2));
      Value quad = kb.div(lane, kb.idx(16));
      Value aLane = kb.add(kb.mul(kb.add(kb.mul(w, kb.idx(16)),
                                         kb.add(kb.mul(half, kb.idx(8)), lane8)),
                                  kb.idx(R)),
                           kb.mul(quad, kb.idx(4)));
      Value tkLane = kb.add(kb.mul(quad, kb.idx(8)), lane8);
      SmallVector<Value> jLane; // per gphi m-tile
      for (int64_t mt = 0; mt < mTiles; ++mt)
        jLane.push_back(kb.min(kb.add(kb.idx(64 * mt),
                                      kb.add(kb.mul(w, kb.idx(16)), kb.mul(half, kb.idx(8)))),
                               kb.idx(N - 8)));

      SmallVector<Value> init(mTiles * 32, zero);
      SmallVector<Value> total = kb.loop(
          kb.idx(0), count, kb.idx(1), init, [&](Value i, ValueRange it) {
            SmallVector<Value> acc(it.begin(), it.end());
            Value at = stageAt(ring.wait(i));
            Value xs = kb.add(at, kb.mul(c, kb.idx(kTile / 4)));
            Value ghs = kb.add(at, kb.idx(2 * kTile / 4));
            Value m0 = kb.mul(kb.add(s0, i), kb.idx(kTokens));
            // D = gh phi, A from the rows (rounded in the pad launch).
            SmallVector<Value> d(32, zero);
            Value aAt = kb.add(ghs, aLane);
            SmallVector<SmallVector<Value>> a;
            for (int64_t s = 0; s < kSteps; ++s)
              a.push_back(kb.ldmatrix4(kb.sharedPtr(smem, kb.add(aAt, kb.idx(8 * s))), false));
            kb.wgmmaFence();
            for (int64_t s = 0; s < kSteps; ++s)
              kb.wgmmaTf32(d, a[s], kb.wgmmaDescriptor(smem, kb.add(myPhi, kb.idx(s * 512)), 128, 256));
            kb.wgmmaCommit();
            // gphi += gh^T x, 16 tokens at a time.
            for (int64_t kk = 0; kk < kTokens / 16; ++kk) {
              // gphi's A = gh^T (rows j, 16 tokens), both parts, by
              // transposing ldmatrix from the planes.
              SmallVector<SmallVector<Value>> parts; // [mt * 2 + part] -> 4 words
              Value tk = kb.add(kb.idx(16 * kk), tkLane);
              for (int64_t mt = 0; mt < mTiles; ++mt) {
                Value at = kb.add(kb.add(ghs, kb.idx(rowsBytes / 4)),
                                  kb.div(kb.add(kb.mul(tk, kb.idx(P)), jLane[mt]), kb.idx(2)));
                for (int64_t part = 0; part < 2; ++part)
                  parts.push_back(kb.ldmatrix4(
                      kb.sharedPtr(smem, kb.add(at, kb.idx(part * planeBytes / 4))), true));
              }
              Value bd = kb.wgmmaDescriptorSwizzled(smem, kb.add(xs, kb.idx(kk * 512)), kTile, 1024);
              kb.wgmmaFence();
              for (int64_t mt = 0; mt < mTiles; ++mt)
                for (int64_t p = 0; p < 2; ++p)
                  kb.wgmmaBf16TransB(MutableArrayRef<Value>(acc).slice(32 * mt, 32),
                                     parts[2 * mt + p], bd);
              // Two k-steps per group: after the first, D is done (epilogue);
              // after the second, the first group.
              if (kk % 2 == 0)
                continue;
              kb.wgmmaCommit();
              kb.wgmmaWait(1);
              if (kk != 1)
                continue;
              // gx through a swizzled tile (the x tile's layout: no bank
              // conflicts), then one tensor store.
              Value o = kb.add(outAt, kb.add(kb.mul(c, kb.idx(kOutTiles * kTile / 4)),
                                             kb.mul(kb.rem(i, kb.idx(kOutTiles)), kb.idx(kTile / 4))));
              kb.when(leader, [&] { kb.bulkWait(kOutTiles - 1, /*readOnly=*/true); });
              kb.namedBarrier(barrierId, 128);
              for (int64_t h = 0; h < 2; ++h) {
                // Token m = r0 + 8h (m % 8 = g): gms rides in column N of
                // its row; the 16-byte pieces of its 128-byte rows are
                // permuted by m % 8.
                Value m = kb.add(r0, kb.idx(8 * h));
                Value gm = kb.mul(kb.load(smem, kb.add(ghs, kb.add(kb.mul(m, kb.idx(R)), kb.idx(N)))),
                                  twoOverK);
                for (int64_t i8 = 0; i8 < 8; ++i8) {
                  Value chunk = arith::XOrIOp::create(kb.b, kb.loc, kb.idx(i8), g);
                  Value byte = kb.add(kb.mul(m, kb.idx(128)),
                                      kb.add(kb.mul(chunk, kb.idx(16)), kb.mul(t, kb.idx(4))));
                  Value f = kb.div(byte, kb.idx(4));
                  Value xv = kb.toF32(LLVM::LoadOp::create(kb.b, kb.loc, bf16x2,
                                                           kb.sharedPtr(smem, kb.add(xs, f)), 4));
                  Value v0 = kb.fma(gm, kb.extract(xv, 0), d[4 * i8 + 2 * h]);
                  Value v1 = kb.fma(gm, kb.extract(xv, 1), d[4 * i8 + 2 * h + 1]);
                  Value out = kb.vector({kb.toType(v0, kb.b.getBF16Type()),
                                         kb.toType(v1, kb.b.getBF16Type())});
                  LLVM::StoreOp::create(kb.b, kb.loc, out, kb.sharedPtr(smem, kb.add(o, f)), 4);
                }
              }
              kb.fenceProxyAsyncShared();
              kb.namedBarrier(barrierId, 128);
              kb.when(leader, [&] {
                kb.tensorStore2d(l.arg("tmap:gx"), kb.sharedPtr(smem, o),
                                 kb.indexToI32(colC), kb.indexToI32(m0));
                kb.bulkCommit();
              });
            }
            kb.wgmmaWait(0);
            ring.release(i, lane);
            return acc;
          });
      kb.when(leader, [&] { kb.bulkWait(0, /*readOnly=*/false); });
      // gphi[j][colC + 8 i8 + 2t + e] = total[32 mt + 4 i8 + 2h + e], j = 64 mt + r0 + 8h.
      Value base = kb.mul(share, kb.idx(N * K));
      for (int64_t mt = 0; mt < mTiles; ++mt)
        for (int64_t h = 0; h < 2; ++h) {
          Value j = kb.add(kb.idx(64 * mt + 8 * h), r0);
          auto write = [&] {
            for (int64_t i8 = 0; i8 < 8; ++i8)
              kb.storeFrom({total[32 * mt + 4 * i8 + 2 * h], total[32 * mt + 4 * i8 + 2 * h + 1]},
                           l.arg("partials"),
                           kb.add(base, kb.add(kb.mul(j, kb.idx(K)),
                                               kb.add(colC, kb.add(kb.idx(8 * i8), kb.mul(t, kb.idx(2)))))));
          };
          if (64 * mt + 64 <= N)
            write();
          else
            kb.when(kb.lt(j, kb.idx(N)), write);
        }
    });
  }
  emitColumnSumFinal(ctx, "partials", N * K, {{"gphi", N * K}}, shares);
  return success();
}
