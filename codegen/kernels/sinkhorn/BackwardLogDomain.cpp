//===- BackwardLogDomain.cpp - the log mode's gradient in the log domain --===//
//
// For the rare tokens whose scaling-form sums left the safe range: the
// forward in potentials f^t, g^t (history), then reverse mode through the
// T iterations, a row (or column) of the n x n matrices at a time.
//
//===----------------------------------------------------------------------===//

#include "kernels/sinkhorn/Sinkhorn.h"

using namespace mlir;
using namespace mlir::mhc;
using namespace mlir::mhc::sinkhorn;

namespace {

/// The log mode's gradient in the log domain, for the rare tokens whose
/// scaling-form sums left the safe range: forward in potentials f^t, g^t
/// (history), then reverse mode through the T iterations. It runs a row (or
/// column) of the n x n matrices at a time in loops that stay rolled,
/// reading L and gP from global memory again and accumulating the gradient
/// G in glogits itself: unrolled over the whole matrix, as the scaling form
/// is, this path was 2/3 of ptxas' work on the n = 8 kernel and kept L and
/// gP in registers through the scaling form.
struct LogDomainGrad {
  KernelBuilder &kb;
  int64_t n, T;
  Value logits, gP, G, m;
  History &history;

  Value at(Value i, Value j) {
    return kb.add(kb.mul(m, kb.idx(n * n)), kb.add(kb.mul(i, kb.idx(n)), j));
  }
  /// Row i (or column i) of a global n x n matrix; L in base 2.
  SmallVector<Value> line(Value buf, Value i, bool row, bool base2) {
    SmallVector<Value> v;
    for (int64_t k = 0; k < n; ++k) {
      Value x = kb.load(buf, row ? at(i, kb.idx(k)) : at(kb.idx(k), i));
      v.push_back(base2 ? toBase2(kb, x) : x);
    }
    return v;
  }
  Value hist(Value t, int64_t off) {
    return kb.add(kb.mul(t, kb.idx(2 * n)), kb.idx(off));
  }

  void emit() {
    Value zero = kb.f32(0.0);
    // Forward: f^t_i = -LSE_j(L_ij + g^{t-1}_j), g^t_j = -LSE_i(L_ij + f^t_i),
    // g^{-1} = 0; history[t] = (f^t, g^t).
    kb.loop(kb.idx(0), kb.idx(T), kb.idx(1), SmallVector<Value>(n, zero),
            [&](Value t, ValueRange it) {
              SmallVector<Value> g(it.begin(), it.end());
              kb.loop(kb.idx(0), kb.idx(n), kb.idx(1), [&](Value i) {
                history.save(kb.add(hist(t, 0), i),
                             negLog2SumExp2Sum(kb, line(logits, i, true, true), g));
              });
              SmallVector<Value> f = history.restore(hist(t, 0), n);
              kb.loop(kb.idx(0), kb.idx(n), kb.idx(1), [&](Value j) {
                history.save(kb.add(hist(t, n), j),
                             negLog2SumExp2Sum(kb, line(logits, j, false, true), f));
              });
              return history.restore(hist(t, n), n);
            });
    // Through P = exp2(L + f^{T-1} + g^{T-1}): G = gP * P, gg_j = column sums.
    Value last = kb.idx(T - 1);
    SmallVector<Value> gT = history.restore(hist(last, n), n);
    SmallVector<Value> gg = kb.loop(
        kb.idx(0), kb.idx(n), kb.idx(1), SmallVector<Value>(n, zero),
        [&](Value i, ValueRange it) {
          SmallVector<Value> acc(it.begin(), it.end());
          Value fi = history.restore(kb.add(hist(last, 0), i), 1)[0];
          SmallVector<Value> P = planRow(kb, line(logits, i, true, true), fi, gT);
          SmallVector<Value> gProw = line(gP, i, true, false);
          for (int64_t j = 0; j < n; ++j) {
            Value d = kb.mul(gProw[j], P[j]);
            kb.store(d, G, at(i, kb.idx(j)));
            acc[j] = kb.add(acc[j], d);
          }
          return acc;
        });
    // Iterations T-1..0; gf (the row sums of gP * P) enters at T-1 only.
    kb.loop(kb.idx(0), kb.idx(T), kb.idx(1), gg, [&](Value r, ValueRange it) {
      Value t = kb.sub(last, r);
      SmallVector<Value> ggt(it.begin(), it.end());
      SmallVector<Value> g = history.restore(hist(t, n), n);
      // g^{t-1}: g = 0 before the first iteration.
      Value first = kb.eq(t, kb.idx(0));
      SmallVector<Value> prev = history.restore(
          hist(kb.select(first, kb.idx(0), kb.sub(t, kb.idx(1))), n), n);
      for (Value &v : prev)
        v = kb.select(first, zero, v);
      return kb.loop(
          kb.idx(0), kb.idx(n), kb.idx(1), SmallVector<Value>(n, zero),
          [&](Value i, ValueRange acc) {
            SmallVector<Value> ggPrev(acc.begin(), acc.end());
            Value fi = history.restore(kb.add(hist(t, 0), i), 1)[0];
            SmallVector<Value> Lrow = line(logits, i, true, true);
            SmallVector<Value> Grow = line(G, i, true, false);
            // g^t_j = -LSE_i(L_ij + f^t_i): A = exp2(L + f^t + g^t).
            SmallVector<Value> A = planRow(kb, Lrow, fi, g);
            SmallVector<Value> gProw = line(gP, i, true, false);
            Value rowSum = zero;
            for (int64_t j = 0; j < n; ++j)
              rowSum = kb.add(rowSum, kb.mul(gProw[j], A[j]));
            Value gfi = kb.select(kb.eq(r, kb.idx(0)), rowSum, zero);
            for (int64_t j = 0; j < n; ++j) {
              Value d = kb.mul(ggt[j], A[j]);
              Grow[j] = kb.sub(Grow[j], d);
              gfi = kb.sub(gfi, d);
            }
            // f^t_i = -LSE_j(L_ij + g^{t-1}_j): B = exp2(L + f^t + g^{t-1}).
            SmallVector<Value> B = planRow(kb, Lrow, fi, prev);
            for (int64_t j = 0; j < n; ++j) {
              Value d = kb.mul(gfi, B[j]);
              Grow[j] = kb.sub(Grow[j], d);
              ggPrev[j] = kb.sub(ggPrev[j], d);
            }
            for (int64_t j = 0; j < n; ++j)
              kb.store(Grow[j], G, at(i, kb.idx(j)));
            return ggPrev;
          });
    });
  }
};

} // namespace

void sinkhorn::emitLogDomainGrad(KernelBuilder &kb, int64_t n, int64_t T,
                                 Value logits, Value gP, Value G, Value m,
                                 History &history) {
  LogDomainGrad{kb, n, T, logits, gP, G, m, history}.emit();
}
