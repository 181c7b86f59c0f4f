//===- ForwardStagedPartial.cpp - the staged forward's partial launch -----===//
//
// The partial launch (ForwardStaged.cpp): its parameters and shared ring,
// the chunks' copies into the ring (or, with one token block, the chunks
// split in place), the loop over the block's chunks and the partials it
// leaves. A chunk's loads are ForwardStagedLoads.cpp's, its products
// ForwardStagedProducts.cpp's.
//
//===----------------------------------------------------------------------===//

#include "kernels/project/ForwardStagedLaunches.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include <optional>

using namespace mlir;
using namespace mlir::mhc;

StagedPartial::StagedPartial(const StagedPlan &p, LaunchBuilder &l,
                             KernelBuilder &kb)
    : p(p), l(l), kb(kb), sk(projectSplitK(kb, l, p.chunks())),
      count(kb.sub(sk.cEnd, sk.cBegin)), ring(l.shared(0)),
      bulk(kb, l.shared(1), kStages, kWarps),
      small(p.fewOnly        ? kb.boolean(true)
            : p.inlineSplit() ? kb.lt(sk.M, kb.idx(p.tokensPerBlock() + 1))
                              : kb.boolean(false)),
      bulkMode(kb.eq(small, kb.boolean(false))) {}

void StagedPartial::emit() {
  auto issue = [&](Value i, Value st) { issueCopy(i, st); };
  Value first = kb.select(small, kb.idx(0), count);
  if (!p.expand) {
    bulk.start(first, issue);
    locateRows();
    storePartials(emitKLoop(firstLoopValues()));
    return;
  }
  // The expand's first chunk's loads go out before its post and P are
  // staged (their round trips overlap); the ring's initialisation, at the
  // start of bulk.start, ends in a block barrier, after which they are read.
  locateRows();
  SmallVector<Value> init = firstLoopValues();
  stageMixing();
  bulk.start(first, issue);
  storePartials(emitKLoop(init));
}

/// Thread 0: the copy of chunk `i` (of this block's range) into buffer `st`.
void StagedPartial::issueCopy(Value i, Value st) {
  int64_t chunkBytes = p.chunkBytes();
  Value bar = bulk.full(st);
  kb.mbarrierArriveExpectTx(bar, chunkBytes);
  Value src = kb.globalPtr(
      l.arg("packed"), kb.mul(kb.add(sk.cBegin, i), kb.idx(chunkBytes / 2)));
  Value dst = kb.sharedPtr(ring, kb.mul(st, kb.idx(chunkBytes / 4)));
  kb.bulkCopy(dst, src, chunkBytes, bar);
}

/// The chunk's pieces: pairs x n-tiles x 32 lanes.
int64_t StagedPartial::fillItems() const { return p.pairs() * p.nTiles * 32; }

/// Items of fillChunk each thread takes: the chunk's pieces over the
/// block's threads.
int64_t StagedPartial::fillRounds() const {
  const int threads = 32 * kWarps;
  return (fillItems() + threads - 1) / threads;
}

/// Item q's piece: pair j, n-tile nt, lane pl.
StagedPartial::PieceIndex StagedPartial::pieceIndex(Value q) {
  Value pl = kb.rem(q, kb.idx(32)), pq = kb.div(q, kb.idx(32));
  Value nt = kb.rem(pq, kb.idx(p.nTiles)), j = kb.div(pq, kb.idx(p.nTiles));
  return {j, nt, pl};
}

Value StagedPartial::weightArg() { return p.hasWeight ? l.arg("weight") : Value(); }

/// With the seam's expand: the thread's pieces of chunk i (every round,
/// clamped to the last piece), zeros without one token block (which copies
/// packed chunks instead). Other plans load their pieces in fillChunk.
SmallVector<Value> StagedPartial::loadPieces(Value i) {
  if (!piecesAhead())
    return {};
  const int threads = 32 * kWarps;
  Value gc = kb.add(sk.cBegin, i);
  return kb.ifElse(
      small,
      [&] {
        SmallVector<Value> v;
        for (int64_t r = 0; r < fillRounds(); ++r) {
          Value q = kb.min(kb.add(kb.threadId(), kb.idx(r * threads)), kb.idx(fillItems() - 1));
          PieceIndex at = pieceIndex(q);
          v.append(pieceLoads(kb, p, l.arg("phi"), weightArg(), gc, at.j, at.nt, at.pl));
        }
        return v;
      },
      [&] { return SmallVector<Value>(fillRounds() * pieceWidth(), kb.f32(0.0)); });
}

/// Chunk i of the block's range into buffer st, split by every thread: the
/// pieces the pack launch would write there, from `pieces` (loadPieces)
/// where the chunk's loads brought them, else loaded here.
void StagedPartial::fillChunk(Value i, Value st, ArrayRef<Value> pieces) {
  const int threads = 32 * kWarps;
  int64_t NT = p.nTiles, P = p.parts, chunkBytes = p.chunkBytes(), per = pieceWidth();
  assert(pieces.empty() || static_cast<int64_t>(pieces.size()) == fillRounds() * per);
  Value gc = kb.add(sk.cBegin, i);
  for (int64_t r = 0; r < fillRounds(); ++r) {
    Value q = kb.add(kb.threadId(), kb.idx(r * threads));
    kb.when(kb.lt(q, kb.idx(fillItems())), [&] {
      auto [j, nt, pl] = pieceIndex(q);
      SmallVector<SmallVector<Value>> parts =
          pieces.empty() ? pieceParts(kb, p, l.arg("phi"), weightArg(), gc, j, nt, pl)
                         : piecePartsOf(kb, p, pieces.slice(r * per, per), nt, pl);
      for (int64_t part = 0; part < P; ++part) {
        Value piece = kb.add(kb.mul(kb.add(kb.mul(kb.add(kb.mul(j, kb.idx(P)), kb.idx(part)),
                                                  kb.idx(NT)), nt), kb.idx(32)), pl);
        Value at = kb.add(kb.mul(st, kb.idx(chunkBytes / 4)), kb.mul(piece, kb.idx(4)));
        Value bits = vector::BitCastOp::create(kb.b, kb.loc, VectorType::get({4}, kb.b.getI32Type()),
                                               kb.vector(parts[part]));
        LLVM::StoreOp::create(kb.b, kb.loc, bits, kb.sharedPtr(ring, at), 16);
      }
    });
  }
}

/// The chunk loop's first values: 4 accumulators per (m-tile, n-tile)
/// (rows g, g + 8 x columns 2t, 2t + 1), then the sums of squares of the
/// rows, then (with prefetch) the first chunk's loads.
SmallVector<Value> StagedPartial::firstLoopValues() {
  SmallVector<Value> init(p.accs() + 2 * p.mTiles, kb.f32(0.0));
  if (p.prefetch())
    loadChunk(kb.idx(0)).appendTo(init);
  return init;
}

/// The loop over the block's chunks, from firstLoopValues.
SmallVector<Value> StagedPartial::emitKLoop(ArrayRef<Value> init) {
  Value zero = kb.f32(0.0);
  return kb.loop(kb.idx(0), count, kb.idx(1), init,
                 [&](Value i, ValueRange it) { return emitChunk(i, it, zero); });
}

/// One chunk: its x (expanded to x_next by the seam), its buffer, the
/// products and the buffer's release.
SmallVector<Value> StagedPartial::emitChunk(Value i, ValueRange it, Value zero) {
  int64_t MT = p.mTiles, accs = p.accs();
  SmallVector<Value> next(it.begin(), it.begin() + accs + 2 * MT);
  ChunkLoads in;
  std::optional<ChunkLoads> ahead;
  if (p.prefetch()) {
    // This chunk's loads came with the iteration values; the next
    // chunk's are in flight during this chunk's expand and mma's.
    in = chunkLoadsFrom(it.drop_front(accs + 2 * MT));
    ahead = loadChunk(kb.min(kb.add(i, kb.idx(1)), kb.sub(count, kb.idx(1))));
  } else {
    in = loadChunk(i);
  }
  if (p.realignX())
    realignRows(i, in);
  if (p.expand)
    expandRows(chunkColumn(i), in);
  const Rows &xs = in.xs;
  Value st = acquireChunk(i, in);
  Value ringBase = kb.mul(st, kb.idx(p.chunkBytes() / 4));
  onLiveWarps(next, [&] {
    SmallVector<Value> total;
    if (p.precise)
      for (int64_t e = 0; e < accs; ++e) {
        total.push_back(next[e]);
        next[e] = zero;
      }
    if (p.wgmma)
      wgmmaProducts(xs, ringBase, next);
    else
      mmaSyncProducts(xs, ringBase, next);
    if (p.precise)
      for (int64_t e = 0; e < accs; ++e)
        next[e] = kb.add(total[e], next[e]);
  });
  kb.when(bulkMode, [&] { bulk.release(i, sk.lane); });
  if (ahead)
    ahead->appendTo(next);
  return next;
}

/// body(), which updates `values`, in "partial_few" only where the warp
/// has a token below M. A warp whose rows are all past M would only repeat
/// row M - 1's expand and products, which nothing stores (mma.sync is per
/// warp; wgmma plans have no few copy).
void StagedPartial::onLiveWarps(SmallVector<Value> &values, function_ref<void()> body) {
  if (!p.fewOnly)
    return body();
  SmallVector<Value> before = values;
  values = kb.ifElse(
      liveWarp,
      [&] {
        body();
        return values;
      },
      [&] { return before; });
}

/// The buffer that holds chunk i once every thread may read it.
Value StagedPartial::acquireChunk(Value i, const ChunkLoads &in) {
  auto issue = [&](Value c, Value buf) { issueCopy(c, buf); };
  // Small: three buffers and a barrier after each fill (a thread
  // filling chunk i's buffer has passed the barrier after chunk
  // i - 1's fill, so every warp is done with chunk i - 3's reads).
  Value st = bulk.stage(i);
  if (p.inlineSplit()) {
    kb.when(small, [&] {
      fillChunk(i, st, in.pieces);
      kb.barrier();
    });
    kb.when(bulkMode, [&] { bulk.acquire(i, count, issue); });
  } else {
    bulk.acquire(i, count, issue);
  }
  return st;
}

/// Writes each of the lane's rows' partials from the loop's results.
void StagedPartial::storePartials(ArrayRef<Value> result) {
  int64_t MT = p.mTiles, NT = p.nTiles, accs = p.accs();
  for (int64_t mt = 0; mt < MT; ++mt)
    for (int h = 0; h < 2; ++h)
      storeProjectPartials(kb, sk, l.arg("partials"), rows[2 * mt + h],
                           result[accs + 2 * mt + h], p.N, NT,
                           [&](int64_t nt, int64_t e) {
                             return result[4 * (mt * NT + nt) + 2 * h + e];
                           });
}

/// One copy of the partial launch (`name`, with `grid`).
static void emitPartialLaunch(KernelContext &ctx, const StagedPlan &p, StringRef name,
                              ::mhc::GridRule grid) {
  LaunchBuilder &l = ctx.launch(name.str());
  l.param("x");
  if (p.expand) {
    l.param("f").param("post").param("P");
    if (p.hasBias)
      l.param("bias");
    l.param("x_next");
  }
  l.param("packed");
  if (p.inlineSplit()) {
    l.param("phi");
    if (p.hasWeight)
      l.param("weight");
  }
  l.param("partials").param("M").param("S")
      .block(32 * kWarps)
      .grid(grid)
      .sharedF32(kStages * p.chunkBytes() / 4, /*align=*/128)
      .sharedI64(2 * kStages)
      .minBlocksPerSM(p.expand ? 1 : p.blocksPerSM);
  if (p.expand)
    l.sharedF32(p.tokensPerBlock() * (p.n + p.n * p.n)); // post | P per token
  KernelBuilder kb = ctx.begin(l);
  limitRowAccesses(ctx, kb, l, {"x"});
  StagedPartial(p, l, kb).emit();
}

void mlir::mhc::emitStagedPartial(KernelContext &ctx, const StagedPlan &p) {
  ::mhc::GridRule grid{p.tokensPerBlock(), 0, /*timesSplit=*/true};
  if (p.wgmma)
    return emitPartialLaunch(ctx, p, "partial", grid);
  ::mhc::GridRule few = grid;
  grid.minTokens = p.fewTokens() + 1;
  few.maxTokens = p.fewTokens();
  StagedPlan fewPlan = p;
  fewPlan.fewOnly = true;
  emitPartialLaunch(ctx, p, "partial", grid);
  emitPartialLaunch(ctx, fewPlan, "partial_few", few);
}
