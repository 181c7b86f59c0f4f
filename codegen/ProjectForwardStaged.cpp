//===- ProjectForwardStaged.cpp - projection forward for bf16 activations -===//
//
// h = (x w) phi^T and the sum of squares for bf16 x, on bf16 tensor cores
// (mma.sync m16n8k16) with phi staged through shared memory by bulk copies.
//
// phi w is split once per call (launch "pack") into P bf16 parts, hi =
// rn(v), lo = rn(v - hi)[, rn(v - hi - lo)]: two parts carry 2^-17 of v
// (finer than tf32's 2^-11) for the tf32 mode, three carry fp32's 24 bits.
// bf16 x times a bf16 part is exact in fp32, so x is never converted: a
// lane's 16-byte x load is two k-steps of its A fragments as they are. The
// parts are written in fragment order: per chunk of 16·SQ columns, per pair
// of k-steps, part and n-tile, 32 lanes x 16 bytes, so that one bulk copy
// moves a chunk's B into shared memory and every B read is a contiguous
// 512-byte warp access.
//
// Partial launch: 8 warps, warp w owns tokens 16w..16w+15 of the block's
// 128; lane (g, t) loads tokens g and g + 8, 16 bytes at byte 64j + 16t of
// the chunk's run for pair j (a warp access covers 8 rows x 64 bytes). The
// contraction index is permuted inside each 32-column pair: logical k
// {2t, 2t+1, 2t+8, 2t+9} of step 2j+h is physical 32j + 8t + 4h + {0..3},
// for A and B alike. Thread 0 keeps a ring of RST chunk buffers filled: it
// waits until every warp released the buffer (an mbarrier per buffer), then
// issues the next chunk's copy, which completes on the buffer's "full"
// mbarrier. A warp releases a buffer after a proxy fence: without it the
// next copy overwrote B that slow lanes were still reading (seen on H100 as
// 2e-2 errors with 24 KB buffers). Split-K over S ranges of chunks writes
// the same fixed-order partials [S, M, N + 1] as the tf32 kernel, summed by
// its reduce launch.
//
// H100, n = 4, M = 32768, C = 7168 (bench/proj_probe.py, the same kernel in
// CUDA C): 639 us against 724 us for the register-fed tf32 kernel.
//
//===----------------------------------------------------------------------===//

#include "Families.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;
using namespace mlir::mhc;
using ::mhc::BufferRole;
using ::mhc::DType;

namespace {

constexpr int kWarps = 8;
constexpr int64_t kStages = 3;
/// The chunk shape of a spec: SQ k-steps of 16 columns per chunk, and the
/// blocks per SM.
struct Staged {
  int64_t sq, parts, nTiles;
  int blocksPerSM;
  int64_t chunk() const { return 16 * sq; }
  /// Bytes of packed B per chunk: (sq / 2) pairs x parts x n-tiles x 512.
  int64_t chunkBytes() const { return (sq / 2) * parts * nTiles * 512; }
};

std::optional<Staged> stagedShape(const KernelContext &ctx) {
  // Bulk copies and expect-tx mbarriers need sm_90.
  if (ctx.spec.act != DType::BF16 || ctx.spec.arch == "sm_80")
    return std::nullopt;
  Staged s{8, ctx.spec.tf32 ? 2 : 3, (ctx.N() + 7) / 8, 2};
  // A pair of k-steps holds the accumulators (twice in precise mode) and
  // B's words (parts x n-tiles x 4) in registers: two blocks per SM (128
  // registers) while they stay near 64, else one block (255 registers)
  // with all the shared memory for its ring. n = 8 (tf32): two blocks with
  // 32-column chunks spilled 120 bytes and took 4235 us at C = 7168, M =
  // 32768 on H100; one block with 64-column chunks 2453 us, no spill.
  int64_t live = 4 * s.nTiles * (ctx.spec.tf32 ? 1 : 2) + 4 * s.parts * s.nTiles;
  s.blocksPerSM = live <= 64 ? 2 : 1;
  if (s.blocksPerSM == 1) // (the x of 4 pairs would spill at n = 8)
    s.sq = 4;
  int64_t ringBytes =
      (LaunchBuilder::sharedLimit(ctx.spec.arch) - 2048) / s.blocksPerSM;
  for (; s.sq >= 2; s.sq /= 2)
    if (ctx.K() % s.chunk() == 0 && kStages * s.chunkBytes() <= ringBytes)
      return s;
  return std::nullopt;
}

/// The four 32-bit words of a 16-byte vector (two bf16 each, low half
/// first: the register layout of mma fragments).
SmallVector<Value> words(KernelBuilder &kb, Value v) {
  auto i32x4 = VectorType::get({4}, kb.b.getI32Type());
  Value w = vector::BitCastOp::create(kb.b, kb.loc, i32x4, v);
  SmallVector<Value> out;
  for (int64_t e = 0; e < 4; ++e)
    out.push_back(kb.extract(w, e));
  return out;
}

/// The bf16 values in the low and high halves of a word, as f32.
std::pair<Value, Value> halves(KernelBuilder &kb, Value w) {
  Type f32 = kb.b.getF32Type();
  Value lo = arith::ShLIOp::create(kb.b, kb.loc, w, kb.i32(16));
  Value hi = kb.andi(w, kb.i32(static_cast<int32_t>(0xFFFF0000u)));
  return {arith::BitcastOp::create(kb.b, kb.loc, f32, lo),
          arith::BitcastOp::create(kb.b, kb.loc, f32, hi)};
}

/// c += A B on the tensor cores: m16n8k16, bf16 operands, f32 accumulators.
void mmaBf16(KernelBuilder &kb, ArrayRef<Value> a, ArrayRef<Value> b,
             MutableArrayRef<Value> c) {
  Type f32 = kb.b.getF32Type();
  auto result = LLVM::LLVMStructType::getLiteral(kb.b.getContext(),
                                                 {f32, f32, f32, f32});
  auto op = NVVM::MmaOp::create(
      kb.b, kb.loc, result, a, b, c, ArrayRef<int64_t>{16, 8, 16},
      std::nullopt, std::nullopt,
      std::array<NVVM::MMATypes, 2>{NVVM::MMATypes::bf16, NVVM::MMATypes::bf16},
      std::array<NVVM::MMALayout, 2>{NVVM::MMALayout::row, NVVM::MMALayout::col});
  for (int64_t e = 0; e < 4; ++e)
    c[e] = LLVM::ExtractValueOp::create(kb.b, kb.loc, op.getResult(),
                                        ArrayRef<int64_t>{e});
}

} // namespace

bool mlir::mhc::projectForwardIsStaged(const KernelContext &ctx) {
  return stagedShape(ctx).has_value();
}

LogicalResult mlir::mhc::buildProjectForwardStaged(KernelContext &ctx) {
  const ::mhc::KernelSpec &spec = ctx.spec;
  Staged sh = *stagedShape(ctx);
  int64_t N = ctx.N(), K = ctx.K(), NT = sh.nTiles, P = sh.parts;
  int64_t CH = sh.chunk(), chunks = K / CH, pairs = sh.sq / 2;
  int64_t chunkBytes = sh.chunkBytes();
  bool precise = !spec.tf32;
  const int threads = 32 * kWarps;
  const int64_t tokensPerBlock = 16 * kWarps;

  ctx.manifest.split = {tokensPerBlock, ctx.persistentBlocks(),
                        std::min<int64_t>(64, chunks)};
  declareProjectForwardIO(ctx);
  ctx.buffer("packed", DType::BF16, BufferRole::Workspace, {0, P * NT * 8 * K});
  ctx.buffer("partials", DType::F32, BufferRole::Workspace, {0, 0, N + 1});

  {
    // One thread per 16-byte piece of the packed parts.
    const int pthreads = 256;
    int64_t pieces = K * P * NT;
    LaunchBuilder &l = ctx.launch("pack");
    l.param("phi");
    if (spec.hasWeight)
      l.param("weight");
    l.param("packed").block(pthreads).grid({0, (pieces + pthreads - 1) / pthreads});
    KernelBuilder kb = ctx.begin(l);
    Value i = kb.add(kb.mul(kb.blockId(), kb.idx(pthreads)), kb.threadId());
    kb.when(kb.lt(i, kb.idx(pieces)), [&] {
      Value lane = kb.rem(i, kb.idx(32)), q = kb.div(i, kb.idx(32));
      Value nt = kb.rem(q, kb.idx(NT));
      q = kb.div(q, kb.idx(NT));
      Value part = kb.rem(q, kb.idx(P));
      q = kb.div(q, kb.idx(P));
      Value j = kb.rem(q, kb.idx(pairs)), c = kb.div(q, kb.idx(pairs));
      Value row = kb.add(kb.mul(nt, kb.idx(8)), kb.div(lane, kb.idx(4)));
      Value col = kb.add(kb.add(kb.mul(c, kb.idx(CH)), kb.mul(j, kb.idx(32))),
                         kb.mul(kb.rem(lane, kb.idx(4)), kb.idx(8)));
      Value valid = kb.lt(row, kb.idx(N));
      Value off = kb.add(kb.mul(kb.min(row, kb.idx(N - 1)), kb.idx(K)), col);
      SmallVector<Value> v = kb.loadF32(l.arg("phi"), off, 8);
      SmallVector<Value> w;
      if (spec.hasWeight)
        w = kb.loadF32(l.arg("weight"), col, 8);
      Type bf16 = kb.b.getBF16Type();
      SmallVector<Value> out;
      for (int64_t e = 0; e < 8; ++e) {
        Value r = spec.hasWeight ? kb.mul(v[e], w[e]) : v[e];
        r = kb.select(valid, r, kb.f32(0.0));
        // Part p is the rounded rest after parts 0..p-1.
        Value sel = kb.toType(r, bf16);
        for (int64_t p = 1; p < P; ++p) {
          r = kb.sub(r, kb.toF32(kb.toType(r, bf16)));
          sel = kb.select(kb.eq(part, kb.idx(p)), kb.toType(r, bf16), sel);
        }
        out.push_back(sel);
      }
      kb.vstore(kb.vector(out), l.arg("packed"), kb.mul(i, kb.idx(8)));
    });
  }

  {
    LaunchBuilder &l = ctx.launch("partial");
    l.param("x").param("packed").param("partials").param("M").param("S")
        .block(threads)
        .grid({tokensPerBlock, 0, /*timesSplit=*/true})
        .sharedF32(kStages * chunkBytes / 4, /*align=*/128)
        .sharedI64(2 * kStages)
        .minBlocksPerSM(sh.blocksPerSM);
    KernelBuilder kb = ctx.begin(l);
    ProjectSplitK sk = projectSplitK(kb, l, chunks);
    Value M = sk.M, lane = sk.lane, warp = sk.warp, g = sk.g, t = sk.t;
    Value cBegin = sk.cBegin;
    Value count = kb.sub(sk.cEnd, cBegin);
    Value ring = l.shared(0), bars = l.shared(1);
    Value x = l.arg("x"), packed = l.arg("packed");
    BulkRing bulk(kb, bars, kStages, kWarps);
    // Thread 0: the copy of chunk `i` (of this block's range) into buffer `st`.
    auto issue = [&](Value i, Value st) {
      Value bar = bulk.full(st);
      kb.mbarrierArriveExpectTx(bar, chunkBytes);
      Value src = kb.globalPtr(
          packed, kb.mul(kb.add(cBegin, i), kb.idx(chunkBytes / 2)));
      Value dst = kb.sharedPtr(ring, kb.mul(st, kb.idx(chunkBytes / 4)));
      kb.bulkCopy(dst, src, chunkBytes, bar);
    };
    bulk.start(count, issue);

    // Tokens g and g + 8 of the warp's 16 (clamped for loads).
    Value r0 = kb.add(kb.mul(sk.mBlock, kb.idx(tokensPerBlock)),
                      kb.add(kb.mul(warp, kb.idx(16)), g));
    Value r1 = kb.add(r0, kb.idx(8));
    Value lastRow = kb.sub(M, kb.idx(1));
    Value x0 = kb.add(kb.mul(kb.min(r0, lastRow), kb.idx(K)), kb.mul(t, kb.idx(8)));
    Value x1 = kb.add(kb.mul(kb.min(r1, lastRow), kb.idx(K)), kb.mul(t, kb.idx(8)));

    // Iteration values: 4 accumulators per n-tile (rows g, g + 8 x columns
    // 2t, 2t + 1), then the two sums of squares.
    Value zero = kb.f32(0.0);
    SmallVector<Value> init(4 * NT + 2, zero);
    SmallVector<Value> result = kb.loop(
        kb.idx(0), count, kb.idx(1), init, [&](Value i, ValueRange it) {
          SmallVector<Value> next(it.begin(), it.end());
          Value col = kb.mul(kb.add(cBegin, i), kb.idx(CH));
          SmallVector<Value> xa, xb;
          for (int64_t j = 0; j < pairs; ++j) {
            xa.push_back(kb.vload(x, kb.add(x0, kb.add(col, kb.idx(32 * j))), 8));
            xb.push_back(kb.vload(x, kb.add(x1, kb.add(col, kb.idx(32 * j))), 8));
          }
          Value st = bulk.acquire(i, count, issue);

          SmallVector<Value> total;
          if (precise)
            for (int64_t e = 0; e < 4 * NT; ++e) {
              total.push_back(next[e]);
              next[e] = zero;
            }
          Value ringBase = kb.mul(st, kb.idx(chunkBytes / 4));
          auto i32x4 = VectorType::get({4}, kb.b.getI32Type());
          for (int64_t j = 0; j < pairs; ++j) {
            // B: 16 bytes per lane per (part, n-tile), two k-steps' worth.
            SmallVector<SmallVector<SmallVector<Value>>> bw(P);
            for (int64_t p = 0; p < P; ++p)
              for (int64_t nt = 0; nt < NT; ++nt) {
                Value off = kb.add(ringBase,
                                   kb.add(kb.idx(((j * P + p) * NT + nt) * 128),
                                          kb.mul(lane, kb.idx(4))));
                Value raw = LLVM::LoadOp::create(kb.b, kb.loc, i32x4,
                                                 kb.sharedPtr(ring, off), 16);
                bw[p].push_back(words(kb, raw));
              }
            SmallVector<Value> wa = words(kb, xa[j]), wb = words(kb, xb[j]);
            for (int64_t e = 0; e < 4; ++e) {
              auto [a0, a1] = halves(kb, wa[e]);
              auto [b0, b1] = halves(kb, wb[e]);
              next[4 * NT] = kb.fma(a1, a1, kb.fma(a0, a0, next[4 * NT]));
              next[4 * NT + 1] = kb.fma(b1, b1, kb.fma(b0, b0, next[4 * NT + 1]));
            }
            for (int h = 0; h < 2; ++h) {
              // A: rows g and g + 8 at logical k {2t, 2t+1} then {2t+8, 2t+9}.
              SmallVector<Value> A = {wa[2 * h], wb[2 * h], wa[2 * h + 1],
                                      wb[2 * h + 1]};
              for (int64_t nt = 0; nt < NT; ++nt)
                for (int64_t p = 0; p < P; ++p)
                  mmaBf16(kb, A, {bw[p][nt][2 * h], bw[p][nt][2 * h + 1]},
                          MutableArrayRef<Value>(next).slice(4 * nt, 4));
            }
          }
          if (precise)
            for (int64_t e = 0; e < 4 * NT; ++e)
              next[e] = kb.add(total[e], next[e]);
          bulk.release(i, lane);
          return next;
        });

    for (int h = 0; h < 2; ++h)
      storeProjectPartials(kb, sk, l.arg("partials"), h ? r1 : r0,
                           result[4 * NT + h], N, NT,
                           [&](int64_t nt, int64_t e) {
                             return result[4 * nt + 2 * h + e];
                           });
  }
  return success();
}
