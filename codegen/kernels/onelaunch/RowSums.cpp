//===- RowSums.cpp - the partials summed in one order ---------------------===//
//
// Every sum of the partials [M, N + 1, G] over the G blocks (the finish's
// sumPartials and the decode path's decodeSums): rows of blocks summed in
// block order, then the rows in row order, so that every block that sums a
// token's partials gets the same bits.
//
//===----------------------------------------------------------------------===//

#include "kernels/onelaunch/Phases.h"

using namespace mlir;
using namespace mlir::mhc;
using namespace mlir::mhc::onelaunch;

namespace {

/// The partials' element of block b, item (m * width + col): [M][width][G],
/// so that a row's blocks (and the rows of one item) are consecutive words:
/// every block's redundant sums of the decode path (decodeSums) read whole
/// sectors.
Value partialAt(KernelBuilder &kb, const Plan &p, Value item, Value b) {
  return kb.add(kb.mul(item, kb.idx(p.G)), b);
}

} // namespace

int64_t onelaunch::finishRowBlocks(const Plan &p) {
  return (p.G + p.finishRows - 1) / p.finishRows;
}

SmallVector<Value> onelaunch::rowLoads(LaunchBuilder &l, KernelBuilder &kb,
                                       const Plan &p, Value item, Value r,
                                       int64_t u0, int64_t u1) {
  int64_t B = finishRowBlocks(p);
  SmallVector<Value> v;
  for (int64_t u = u0; u < u1; ++u) {
    Value b = kb.add(kb.mul(r, kb.idx(B)), kb.idx(u));
    Value inside = kb.lt(b, kb.idx(p.G));
    Value bc = kb.min(b, kb.idx(p.G - 1));
    Value x = kb.load(l.arg("partials"), partialAt(kb, p, item, bc));
    v.push_back(kb.select(inside, x, kb.f32(0.0)));
  }
  return v;
}

Value onelaunch::addInOrder(KernelBuilder &kb, Value sum,
                            ArrayRef<Value> loads) {
  for (Value x : loads)
    sum = sum ? kb.add(sum, x) : x;
  return sum;
}

Value onelaunch::rowSum(LaunchBuilder &l, KernelBuilder &kb, const Plan &p,
                        Value item, Value r) {
  int64_t B = finishRowBlocks(p);
  Value sum;
  for (int64_t u0 = 0; u0 < B; u0 += kFinishLoads)
    sum = addInOrder(kb, sum, rowLoads(l, kb, p, item, r, u0,
                                       std::min(B, u0 + kFinishLoads)));
  return sum;
}

