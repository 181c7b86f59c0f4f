//===- Phases.h - the one-launch kernel's plan and phases -------*- C++ -*-===//
//
// What the one-launch forward's files (docs/design/serve.md) share: the
// plan (Plan.cpp), phase 1's stage (Stage.cpp) and partials (Partials.cpp),
// the partials' sums in one order (RowSums.cpp), the decode path
// (Decode.cpp) and the path past the tile (Finish.cpp); OneLaunch.cpp puts
// them in one launch.
//
//===----------------------------------------------------------------------===//

#ifndef MHC_CODEGEN_KERNELS_ONELAUNCH_PHASES_H
#define MHC_CODEGEN_KERNELS_ONELAUNCH_PHASES_H

#include "builder/KernelContext.h"

#include <utility>

namespace mlir::mhc::onelaunch {

constexpr int kThreads = 256;
/// Tokens whose x_next slices phase 1 keeps in shared memory at once (the
/// most; fewer where shared memory is short).
constexpr int64_t kTileTokens = 16;
/// Tokens of the partials' short FMA pass (a tile with at most this many
/// live tokens); fuller tiles take one pass over all their tokens.
constexpr int64_t kPassTokens = 4;
/// Items (token, channel) whose loads a thread of phase 1's stage issues
/// before computing any.
constexpr int64_t kStageItems = 4;
/// The most thread rows that share a column in phase 3, and the blocks'
/// partials each of its threads loads at once (issued before their adds).
constexpr int64_t kFinishRows = 16;
constexpr int64_t kFinishLoads = 16;

/// Names of the buffers the kernel reads and writes (the seam's contract
/// renames pre's post and P).
struct Names {
  const char *x, *post, *P;
};

/// Phase 1's shapes. The block's local columns kl in [0, L = n * cntMax)
/// (NC: i * cntMax + cl; CN: cl * n + i, contiguous in K) are padded to Lp,
/// a multiple of the thread groups: group g sums kl = g, g + groups, ...
/// in T steps. xs holds x_next as [Lp][tile] (token-minor, zeros past the
/// slice), phiS the slice of phi as [N][Ls] (Ls = Lp rounded odd: rows in
/// distinct banks) when it fits, else phi is read from global.
/// The stage's threads take a quad of tokens (quad = min(tile, 4)) on one
/// channel; xs's row of column kl holds the tile's Q = tile / quad quads
/// rotated by kl's local channel (xsAt).
struct Plan {
  int64_t G, cntMax, L, width, groups, T, Lp, Ls, tile, pass, finishRows, quad, Q;
  bool stagePhi;
  /// Programmatic dependent launch (sm_90+): the grid may start while the
  /// stream's previous kernel finishes, and waits for it before its first
  /// global access (griddepcontrol.wait).
  bool dependent;
};

/// The spec's plan: the largest tile (phi's slice staged where it can be)
/// whose shared memory fits the architecture's limit.
Plan planOneLaunch(const KernelContext &ctx);

/// Phase 1 for one tile of tokens: x_next of the block's channels [c0, c0 +
/// cnt) into shared `xs`, then the block's partials of those tokens.
struct Phase1 {
  KernelContext &ctx;
  LaunchBuilder &l;
  KernelBuilder &kb;
  bool expand;
  Names names;
  const Plan &p;
  Value c0, cnt, xs, phiS, wS, red, mixS;

  // Where things are (Stage.cpp).
  Value xIndex(Value m, int64_t i, Value c);
  Value localCol(int64_t i, Value cl);
  std::pair<Value, Value> globalCol(Value kl);
  Value phiGlobal(Value j, Value kl);
  Value localChannel(Value kl);
  Value xsAt(Value kl, Value cl, Value tm);
  SmallVector<Value> loadToken(Value mem, Value m, Value c);
  void storeToken(ArrayRef<Value> v, Value mem, Value m, Value c);
  std::pair<Value, Value> stageItem(Value item);
  // The stage (Stage.cpp).
  void zeroXs();
  void stagePhiSlice();
  void stage(Value m0, Value live);
  void stageMix(Value m0, Value live);
  SmallVector<Value> combined(Value tm, ArrayRef<Value> xl, Value fb);
  // The partials (Partials.cpp).
  SmallVector<Value> xsTokens(Value kl, int64_t tokens);
  void pass(Value g, Value j, int64_t tokens, bool squares);
  void partials(Value m0, Value live, Value bid);
};

/// Blocks of the partials each row of the finish sums (finishRows rows).
int64_t finishRowBlocks(const Plan &p);
/// The loads of blocks r * B + u, u in [u0, u1), of row r's share of the G
/// partials of `item`, 0 past G.
SmallVector<Value> rowLoads(LaunchBuilder &l, KernelBuilder &kb, const Plan &p,
                            Value item, Value r, int64_t u0, int64_t u1);
/// `sum` (null: none yet) plus the loads in order.
Value addInOrder(KernelBuilder &kb, Value sum, ArrayRef<Value> loads);
/// Row r's sum of `item` over its B blocks in block order, kFinishLoads
/// loads in flight. Every sum of the partials over the G slices is these
/// rows, then the rows in order (sumPartials, decodeTotal): one order.
Value rowSum(LaunchBuilder &l, KernelBuilder &kb, const Plan &p, Value item,
             Value r);

/// Token m's partials summed (sumPartials), then scale with the thread's
/// alpha and beta (`ab`), emitTokenScale: h, ms, pre, post and logits
/// stored, the logits also into logitsS[at ..]. Ends with a barrier.
void finishScale(KernelContext &ctx, LaunchBuilder &l, KernelBuilder &kb,
                 const Names &names, const Plan &p, Value m, Value fin, Value row,
                 Value logitsS, Value at, std::pair<Value, Value> ab);
/// Token m's Sinkhorn in this thread, from its logits in logitsS[at ..].
void sinkhornToken(KernelContext &ctx, LaunchBuilder &l, KernelBuilder &kb,
                   const Names &names, Value m, Value logitsS, Value at);
/// Phase 3 (M > tile) for token m: finishScale, then thread 0's Sinkhorn.
void finishToken(KernelContext &ctx, LaunchBuilder &l, KernelBuilder &kb,
                 const Names &names, const Plan &p, Value m, Value fin, Value row,
                 Value mix, std::pair<Value, Value> ab);
/// Phase 5 (M > tile): y on the block's slice, for every token, with the
/// aggregate's fma chain; item = m * cntMax + cl (constant divisors), each
/// thread issuing the loads of kStageItems items (pre and x) before
/// computing any.
void writeY(KernelContext &ctx, LaunchBuilder &l, KernelBuilder &kb, Phase1 &p1,
            const char *xn);

/// A block's tokens in the decode path (M <= tile): bid + k G, k < this.
int64_t ownTokens(const Plan &p);
/// The decode path's sums (M <= tile), one round of loads: every block sums
/// pre's columns (h_i, i < n, and the squares) of every token into fin2
/// [M][n + 1][R], and the other columns (post's, the logits') of its own
/// tokens (bid + k G) into finOwn [own][N - n][R], each column as its R
/// rows (rowSum, sumPartials' rows: every block and the owner get the same
/// bits); then squashes pre into preS [M][n]. Two tasks' loads in flight per
/// thread where a row has <= kFinishLoads blocks. abS: (alpha, beta) of
/// pre's i.
void decodeSums(KernelContext &ctx, LaunchBuilder &l, KernelBuilder &kb,
                const Plan &p, Value fin2, Value finOwn, Value preS, Value abS);
/// The decode path's finish of the block's k-th token m (after decodeSums):
/// h and ms from fin2 and finOwn (the rows added in order: sumPartials'
/// bits) stored and into `row`, then scale (emitTokenScale) with the
/// thread's alpha and beta: pre, post and logits stored, the logits also
/// into logitsS[at ..]. Ends with a barrier.
void decodeFinish(KernelContext &ctx, LaunchBuilder &l, KernelBuilder &kb,
                  const Names &names, const Plan &p, Value m, Value k, Value fin2,
                  Value finOwn, Value row, Value logitsS, Value at,
                  std::pair<Value, Value> ab);
/// The decode path's y (M <= tile) on threads firstThread.. (warp 0 runs
/// the Sinkhorn meanwhile): pre from preS and x_next from xs (the block's
/// own, as phase 1 stored it), with the aggregate's fma chain; the stage's
/// item order (xs's banks).
void writeYShared(KernelContext &ctx, LaunchBuilder &l, KernelBuilder &kb,
                  Phase1 &p1, Value preS, int64_t firstThread);

} // namespace mlir::mhc::onelaunch

#endif // MHC_CODEGEN_KERNELS_ONELAUNCH_PHASES_H
