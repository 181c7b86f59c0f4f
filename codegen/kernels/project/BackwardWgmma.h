//===- BackwardWgmma.h - the wgmma backward's parts -------------*- C++ -*-===//
//
// What the n = 6, 8 projection backward on wgmma shares between its files
// (BackwardWgmma.cpp: the design, the plan and the build;
// BackwardWgmmaPad.cpp: launch "pad"; BackwardWgmmaMain.cpp and
// BackwardWgmmaConsumer.cpp: launch "main").
//
//===----------------------------------------------------------------------===//

#ifndef MHC_CODEGEN_KERNELS_PROJECT_BACKWARDWGMMA_H
#define MHC_CODEGEN_KERNELS_PROJECT_BACKWARDWGMMA_H

#include "builder/BulkRing.h"
#include "builder/KernelContext.h"

namespace mlir::mhc::wgmma {

constexpr int64_t kTokens = 64;   // tokens per step (wgmma's M)
constexpr int64_t kCols = 128;    // columns per block
constexpr int64_t kMaxStages = 8; // even: a stage always serves one consumer
constexpr int64_t kTile = 8192;   // bytes of a [64][64] bf16 tile
constexpr int64_t kAlign = 1024;  // the swizzle's period in shared memory
// Pacing (WavePacer): the blocks of one wave (smCount() consecutive block
// ids) issue their steps in loose lockstep: a producer issues step i once
// every block of its wave has issued step i - kPaceLag - 1, the counters
// zeroed by the pad launch. Faster at every shape measured; epochs of
// two steps or two steps of slack were slower (docs/design/project.md).
constexpr int64_t kPaceLag = 1;

/// The kernel's plan: the gh image and the shared-memory layout (bytes),
/// the ring's depth, the grid and its waves.
struct WgmmaPlan {
  int64_t N, K;
  int64_t planeBytes;  // one part of a step's gh
  int64_t imageBytes;  // both parts, then gms
  int64_t imageFloats; // (N + 1) per token
  int64_t cmRow;       // 8 tokens of a plane
  int64_t stageBytes, phiPlane, phiBytes;
  int64_t phiRow;   // 8 rows of phi
  int64_t outBytes; // per consumer, two tiles
  int64_t stages, slices, shares, blocks, sms, waves;
};

WgmmaPlan planWgmma(const KernelContext &ctx);
/// Launch "pad": each step's gh image (both bf16 parts as core matrices,
/// then gms), and block 0 zeroes the main launch's pacing counters.
void buildPadLaunch(KernelContext &ctx, const WgmmaPlan &p);

/// A consumer warpgroup's values: its index c (0, 1), its thread ct, warp
/// w and lane (g, t), its rows r0 (+ 8) of a fragment, its named barrier
/// and gx's output tiles.
struct WgmmaConsumer {
  Value c, ct, w, lane, g, t, r0, zero, twoOverK, leader, barrierId, out;
};

/// Launch "main": the block's slice, share and shared-memory layout, and
/// the emission of its parts (phi, the producer, the consumers' steps).
class WgmmaMain {
public:
  WgmmaMain(KernelContext &ctx, const WgmmaPlan &p, LaunchBuilder &l);
  void emit();

private:
  Value stageAt(Value st);
  void stagePhi();
  void produce();
  WgmmaConsumer consumerValues();
  SmallVector<Value> products(const WgmmaConsumer &cs, Value at, Value img,
                              SmallVector<Value> &acc);
  void storeGx(const WgmmaConsumer &cs, ArrayRef<Value> d, Value at, Value img, Value m0);
  void storePartials(const WgmmaConsumer &cs, ArrayRef<Value> total);
  void consume();

  const WgmmaPlan &p;
  LaunchBuilder &l;
  KernelBuilder kb;
  Value M, tid, bid, smem;
  BulkRing ring;
  Value slice, share, colBase, per, s0, count, phiAt, outAt, wg;
};

} // namespace mlir::mhc::wgmma

#endif // MHC_CODEGEN_KERNELS_PROJECT_BACKWARDWGMMA_H
