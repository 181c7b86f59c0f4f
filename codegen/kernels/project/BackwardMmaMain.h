//===- BackwardMmaMain.h - the mma.sync backward's main launch --*- C++ -*-===//
//
// The emitter of the mma.sync projection backward's main launch
// (BackwardMma.cpp: the kernel; BackwardMmaCopies.cpp: the rings' copies;
// BackwardMmaStep.cpp: a step's products and gx; BackwardMmaAnyK.cpp: x's
// rows at any K; BackwardMmaWords.cpp, BackwardMmaGxGranules.cpp: x and gx
// at 2- and 4-byte rows; BackwardMmaFold.cpp: the seam's aggregate fold),
// shared by those files.
//
//===----------------------------------------------------------------------===//

#ifndef MHC_CODEGEN_KERNELS_PROJECT_BACKWARDMMAMAIN_H
#define MHC_CODEGEN_KERNELS_PROJECT_BACKWARDMMAMAIN_H

#include "builder/BulkRing.h"
#include "kernels/project/BackwardMmaPlan.h"

#include <array>
#include <optional>

namespace mlir::mhc {

/// What a step reads from its stage: the stage (its base, its ring index
/// i in the block ring), the tokens 2t + u with x's values there, gh's rows
/// and gms scaled by 2/K; with acc, acc's values at the lane's gx columns.
struct StepValues {
  Value step, m0, base, i, ghBase;
  std::array<Value, 2> tok, tokOk, gms;
  std::array<SmallVector<Value>, 2> xa, acc;
};

/// Launch "main": the values every part of the kernel reads, and the
/// emission of its parts (the phi fragments, the rings' copies, a step's
/// products, the share's partials, the paced producer).
class MmaMain {
public:
  MmaMain(KernelContext &ctx, const MmaPlan &p, LaunchBuilder &l,
          bool foldAggregate);
  void emit();

private:
  Value slot(int64_t kt, int64_t rs, int64_t part);
  void parkPhi();
  Value aFragment(int64_t kt, int64_t rs, int64_t part);
  Value stageBase(Value step);
  Value xSlot(Value base, int64_t u, int64_t c);
  Value xSlotPtr(Value base, int64_t u, int64_t c);
  Value pieceBytes(Value src, Value end);
  /// Columns loaded and stored in masked pieces: K % laneCols != 0, except
  /// in the loop of a block whose slice lies inside K (shareSumsBySlice).
  bool masked() const { return p.colPiece < p.laneCols && !wholeSlice; }
  /// The step loop emitted twice, for the slices inside K and the last
  /// (shareSumsBySlice): on the block ring at 8-byte rows. (At 4-byte rows
  /// it measured no gain; with a weight and acc the two loops spilled at
  /// sm_100a's 168 registers.)
  bool loopPerSlice() const {
    return p.staged && masked() && p.xAlign == 8 && !(p.hasW && hasAcc);
  }
  Value colsIn(int64_t offset);
  void copyX(Value dst, Value xOff, Value ok);
  Value wordSlot(Value base, int u, int64_t w);
  void copyWordIf(Value dst, Value src, Value in);
  void copyRowWord(Value dst, Value m0, Value c, Value col, bool partial);
  void copyRowWords(Value base, Value m0, bool partial);
  SmallVector<Value> readRowWords(Value base, int u, Value row);
  SmallVector<Value> wordsToX(ArrayRef<Value> words, Value row);
  void copyXWords(Value base, int u, Value xOff, Value row, Value ok);
  SmallVector<Value> readXWords(Value base, int u, Value row);
  void storeGxWords(StepValues &s, ArrayRef<SmallVector<Value>> gx);
  void storeGxGranules(StepValues &s, ArrayRef<SmallVector<Value>> gx);
  void storeGxStaged(StepValues &s, ArrayRef<SmallVector<Value>> gx);
  Value granuleOffset(int u);
  Value gxVector(ArrayRef<Value> gxU);
  void storeGranules(StepValues &s, int u, ArrayRef<Value> gxU, Value r,
                     ArrayRef<Value> granule, ArrayRef<Value> tail);
  void storeGranulePieces(ArrayRef<Value> words, Value base, Value from, Value to);
  SmallVector<Value> loadLaneCols(Value mem, function_ref<Value(Value)> at);
  void storeLaneCols(ArrayRef<Value> vals, Value mem, function_ref<Value(Value)> at);
  void issuePartialStep(Value step);
  void issueFullStep(Value step);
  void issueStep(Value step);
  void issueBlockStep(Value i, Value st);
  Value rowShift(Value row);
  Value ghAt(Value ghBase, Value tokLocal, int64_t rs, Value i);
  void enterStep(StepValues &s);
  void loadAcc(StepValues &s);
  void foldAggregateInto(StepValues &s);
  // The fold with TE's f32 acc loads acc after the products, with gy and
  // pre: its 2T f32 values per token held through the mma loop spill.
  bool lateAcc() const { return foldAgg && hasAcc && spec.accF32; }
  SmallVector<Value> stepProducts(Value ghBase, ArrayRef<SmallVector<Value>> xa,
                                  SmallVector<Value> &acc);
  void storeGx(StepValues &s, ArrayRef<Value> d, SmallVector<Value> &sums);
  void stepBody(Value step, SmallVector<Value> &sums);
  SmallVector<Value> stepRange(Value lb, Value ub, ValueRange start);
  void startCopies();
  SmallVector<Value> shareSums();
  SmallVector<Value> shareSumsBySlice();
  void storeShare(ArrayRef<Value> total);
  void consume();
  void produce();

  const MmaPlan &p;
  LaunchBuilder &l;
  KernelBuilder kb;
  ::mhc::DType act;
  const ::mhc::KernelSpec &spec;
  bool hasAcc; // gx = acc + the kernel's own gx (spec.readsAcc())
  // acc += pre (x) gy before gx is formed (the seam's and pre.bwd's main
  // pass); the n.
  bool foldAgg;
  int64_t n;
  Value M, tid, bid, lane, warp, g, t, slice, share;
  Value colBase, active, col0, zero, smem, ring;
  SmallVector<Value> w; // the consumers' weights of this lane's columns
  Value twoOverK, per, sBegin, sEnd, lastRow, zeroAcc;
  // Iteration values: gphi's accumulators [kt][rs] (16 columns x 8 rows
  // each), then gw's sums of this lane's columns.
  SmallVector<Value> init;
  Value warpRing, ghEnd, xLane, xBytes;
  Type actVec;
  // The block's ring (staged): stage i % depth holds step sBegin + i; every
  // consumer lane releases its own reads (BulkRing::release).
  std::optional<BulkRing> bulk;
  Value count, sliceCol, xRowBytes, laneColInBlock;
  // rowWords: the column of word `lane` of the warp's columns.
  Value rowWordCol;
  // While the step loop of a slice inside K is emitted: no column masks,
  // every lane active.
  bool wholeSlice = false;
};

} // namespace mlir::mhc

#endif // MHC_CODEGEN_KERNELS_PROJECT_BACKWARDMMAMAIN_H
