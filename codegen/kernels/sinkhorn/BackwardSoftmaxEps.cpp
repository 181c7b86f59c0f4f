//===- BackwardSoftmaxEps.cpp - the softmax_eps mode's gradient -----------===//
//
// The forward recomputed from the softmax with each normalisation's sums
// saved, each normalisation undone in reverse (multiplying back by
// sum + eps), then back through the softmax.
//
//===----------------------------------------------------------------------===//

#include "kernels/sinkhorn/Sinkhorn.h"

using namespace mlir;
using namespace mlir::mhc;
using namespace mlir::mhc::sinkhorn;

namespace {

/// Back through y = x / (s + eps): gx = (gy - sum(gy*y)) / (s + eps)
/// along the normalised axis (rows or columns), then x = y * (s + eps).
void undoNormalize(TokenMath &sk, SmallVector<Value> &Y,
                   SmallVector<Value> &Gy, ArrayRef<Value> s, bool rows) {
  KernelBuilder &kb = sk.kb;
  int64_t n = sk.n;
  SmallVector<Value> dot(n, kb.f32(0.0)), den, inv;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      int64_t a = rows ? i : j;
      dot[a] = kb.fma(Gy[i * n + j], Y[i * n + j], dot[a]);
    }
  for (int64_t a = 0; a < n; ++a) {
    den.push_back(kb.add(s[a], kb.f32(sk.eps)));
    inv.push_back(kb.div(kb.f32(1.0), den.back()));
  }
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      int64_t a = rows ? i : j;
      Gy[i * n + j] = kb.mul(kb.sub(Gy[i * n + j], dot[a]), inv[a]);
      Y[i * n + j] = kb.mul(Y[i * n + j], den[a]);
    }
}

/// The softmax_eps mode's forward from the softmax S, saving each
/// normalisation's sums: step 0 is the first column step, then rows and
/// columns alternate (history[(2t - 1) n] holds iteration t's row sums).
SmallVector<Value> softmaxEpsForward(TokenMath &sk, History &history,
                                     ArrayRef<Value> S, int64_t T) {
  KernelBuilder &kb = sk.kb;
  int64_t n = sk.n;
  SmallVector<Value> P(S.begin(), S.end());
  for (Value &v : P)
    v = kb.add(v, kb.f32(sk.eps));
  SmallVector<Value> c = sk.sums(P, false);
  history.save(kb.idx(0), c);
  P = sk.normalize(P, c, false);
  return kb.loop(kb.idx(1), kb.idx(T), kb.idx(1), P,
                 [&](Value t, ValueRange it) {
                   SmallVector<Value> Q(it.begin(), it.end());
                   Value base = kb.mul(kb.sub(kb.mul(t, kb.idx(2)), kb.idx(1)), kb.idx(n));
                   SmallVector<Value> r = sk.sums(Q, true);
                   history.save(base, r);
                   Q = sk.normalize(Q, r, true);
                   SmallVector<Value> c2 = sk.sums(Q, false);
                   history.save(kb.add(base, kb.idx(n)), c2);
                   return sk.normalize(Q, c2, false);
                 });
}

} // namespace

SmallVector<Value> sinkhorn::softmaxEpsGrad(TokenMath &sk, History &history,
                                            ArrayRef<Value> L, ArrayRef<Value> gP,
                                            int64_t T) {
  KernelBuilder &kb = sk.kb;
  int64_t n = sk.n;
  SmallVector<Value> S = sk.softmax(L);
  SmallVector<Value> P = softmaxEpsForward(sk, history, S, T);
  SmallVector<Value> init = concat(P, gP);
  SmallVector<Value> out = kb.loop(
      kb.idx(1), kb.idx(T), kb.idx(1), init, [&](Value r, ValueRange it) {
        Value t = kb.sub(kb.idx(T), r); // T-1 .. 1
        SmallVector<Value> Y(it.begin(), it.begin() + n * n);
        SmallVector<Value> Gy(it.begin() + n * n, it.end());
        Value base = kb.mul(kb.sub(kb.mul(t, kb.idx(2)), kb.idx(1)), kb.idx(n));
        undoNormalize(sk, Y, Gy, history.restore(kb.add(base, kb.idx(n)), n), false);
        undoNormalize(sk, Y, Gy, history.restore(base, n), true);
        return concat(Y, Gy);
      });
  SmallVector<Value> Y(out.begin(), out.begin() + n * n);
  SmallVector<Value> Gy(out.begin() + n * n, out.end());
  undoNormalize(sk, Y, Gy, history.restore(kb.idx(0), n), false);
  // Through P0 = softmax_j(L) + eps, with the recomputed softmax.
  SmallVector<Value> gL;
  for (int64_t i = 0; i < n; ++i) {
    Value dot = kb.f32(0.0);
    for (int64_t j = 0; j < n; ++j)
      dot = kb.fma(Gy[i * n + j], S[i * n + j], dot);
    for (int64_t j = 0; j < n; ++j)
      gL.push_back(kb.mul(kb.sub(Gy[i * n + j], dot), S[i * n + j]));
  }
  return gL;
}
