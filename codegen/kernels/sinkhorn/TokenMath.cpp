//===- TokenMath.cpp - one token's Sinkhorn math in one thread ------------===//
//
// The n x n matrix of a token lives in registers (value lists, row-major):
// the log mode's base-2 potentials and scaling form, the softmax_eps mode's
// sums and normalisations, and the backward's history slots.
//
//===----------------------------------------------------------------------===//

#include "kernels/sinkhorn/Sinkhorn.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"

using namespace mlir;
using namespace mlir::mhc;
using namespace mlir::mhc::sinkhorn;

Value sinkhorn::negLog2SumExp2(KernelBuilder &kb, ArrayRef<Value> v) {
  Value mx = v[0];
  for (size_t k = 1; k < v.size(); ++k)
    mx = kb.max(mx, v[k]);
  Value sum = kb.exp2(kb.sub(v[0], mx));
  for (size_t k = 1; k < v.size(); ++k)
    sum = kb.add(sum, kb.exp2(kb.sub(v[k], mx)));
  return kb.neg(kb.add(mx, kb.log2(sum)));
}

Value sinkhorn::toBase2(KernelBuilder &kb, Value v) {
  return kb.mul(v, kb.f32(1.4426950408889634));
}
SmallVector<Value> sinkhorn::toBase2(KernelBuilder &kb, ArrayRef<Value> L) {
  SmallVector<Value> out;
  for (Value v : L)
    out.push_back(toBase2(kb, v));
  return out;
}

Value sinkhorn::negLog2SumExp2Sum(KernelBuilder &kb, ArrayRef<Value> a,
                                  ArrayRef<Value> b) {
  SmallVector<Value> v = {kb.add(a[0], b[0])};
  for (size_t k = 1; k < a.size(); ++k)
    v.push_back(kb.add(a[k], b[k]));
  return negLog2SumExp2(kb, v);
}

SmallVector<Value> sinkhorn::planRow(KernelBuilder &kb, ArrayRef<Value> Lrow,
                                     Value fi, ArrayRef<Value> g) {
  SmallVector<Value> P;
  for (size_t j = 0; j < Lrow.size(); ++j)
    P.push_back(kb.exp2(kb.add(kb.add(Lrow[j], fi), g[j])));
  return P;
}

SmallVector<Value> TokenMath::rowPotential(ArrayRef<Value> L, ArrayRef<Value> g) {
  SmallVector<Value> f;
  for (int64_t i = 0; i < n; ++i)
    f.push_back(negLog2SumExp2Sum(kb, L.slice(i * n, n), g));
  return f;
}

SmallVector<Value> TokenMath::colPotential(ArrayRef<Value> L, ArrayRef<Value> f) {
  SmallVector<Value> g;
  for (int64_t j = 0; j < n; ++j) {
    SmallVector<Value> col;
    for (int64_t i = 0; i < n; ++i)
      col.push_back(L[i * n + j]);
    g.push_back(negLog2SumExp2Sum(kb, col, f));
  }
  return g;
}

SmallVector<Value> TokenMath::plan(ArrayRef<Value> L, ArrayRef<Value> f,
                                   ArrayRef<Value> g) {
  SmallVector<Value> P;
  for (int64_t i = 0; i < n; ++i)
    P.append(planRow(kb, L.slice(i * n, n), f[i], g));
  return P;
}

SmallVector<Value> TokenMath::kernelMatrix(ArrayRef<Value> L2) {
  return rowShiftedExp(L2, /*base2=*/true);
}

SmallVector<Value> TokenMath::rowShiftedExp(ArrayRef<Value> L, bool base2) {
  SmallVector<Value> E;
  for (int64_t i = 0; i < n; ++i) {
    Value mx = L[i * n];
    for (int64_t j = 1; j < n; ++j)
      mx = kb.max(mx, L[i * n + j]);
    for (int64_t j = 0; j < n; ++j) {
      Value d = kb.sub(L[i * n + j], mx);
      E.push_back(base2 ? kb.exp2(d) : kb.exp(d));
    }
  }
  return E;
}

SmallVector<Value> TokenMath::scale(ArrayRef<Value> K, ArrayRef<Value> w,
                                    bool rows, Value &ok) {
  SmallVector<Value> out;
  for (int64_t a = 0; a < n; ++a) {
    Value acc = kb.f32(0.0);
    for (int64_t b = 0; b < n; ++b)
      acc = kb.fma(rows ? K[a * n + b] : K[b * n + a], w[b], acc);
    ok = kb.andi(ok, kb.andi(kb.lt(kb.f32(0x1p-100), acc),
                             kb.lt(acc, kb.f32(0x1p100))));
    // In that range rcp.approx.ftz is within 1 ulp (no denormals).
    out.push_back(LLVM::CallIntrinsicOp::create(
                      kb.b, kb.loc, kb.b.getF32Type(),
                      kb.b.getStringAttr("llvm.nvvm.rcp.approx.ftz.f"),
                      ValueRange{acc})
                      .getResult(0));
  }
  return out;
}

SmallVector<Value> TokenMath::scaledPlan(ArrayRef<Value> K, ArrayRef<Value> u,
                                         ArrayRef<Value> v) {
  SmallVector<Value> P;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j)
      P.push_back(kb.mul(kb.mul(K[i * n + j], u[i]), v[j]));
  return P;
}

SmallVector<Value> TokenMath::sums(ArrayRef<Value> P, bool rows) {
  SmallVector<Value> s;
  for (int64_t a = 0; a < n; ++a) {
    Value acc = rows ? P[a * n] : P[a];
    for (int64_t b = 1; b < n; ++b)
      acc = kb.add(acc, rows ? P[a * n + b] : P[b * n + a]);
    s.push_back(acc);
  }
  return s;
}

SmallVector<Value> TokenMath::normalize(ArrayRef<Value> P, ArrayRef<Value> s,
                                        bool rows) {
  return normalize(P, s, rows, eps);
}

SmallVector<Value> TokenMath::normalize(ArrayRef<Value> P, ArrayRef<Value> s,
                                        bool rows, float addend) {
  SmallVector<Value> inv;
  for (int64_t a = 0; a < n; ++a)
    inv.push_back(addend == 0.0f ? kb.div(kb.f32(1.0), s[a])
                                 : kb.div(kb.f32(1.0), kb.add(s[a], kb.f32(addend))));
  SmallVector<Value> out;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j)
      out.push_back(kb.mul(P[i * n + j], inv[rows ? i : j]));
  return out;
}

SmallVector<Value> TokenMath::softmaxPlusEps(ArrayRef<Value> L) {
  SmallVector<Value> S = softmax(L);
  for (Value &v : S)
    v = kb.add(v, kb.f32(eps));
  return S;
}

SmallVector<Value> TokenMath::softmax(ArrayRef<Value> L) {
  SmallVector<Value> e = rowShiftedExp(L, /*base2=*/false);
  return normalize(e, sums(e, /*rows=*/true), /*rows=*/true, /*eps=*/0.0f);
}

SmallVector<Value> sinkhorn::loadMatrix(KernelBuilder &kb, Value buf, Value m,
                                        int64_t n) {
  SmallVector<Value> out;
  for (int64_t k = 0; k < n * n; ++k)
    out.push_back(kb.load(buf, kb.add(kb.mul(m, kb.idx(n * n)), kb.idx(k))));
  return out;
}

void sinkhorn::storeMatrix(KernelBuilder &kb, ArrayRef<Value> P, Value buf,
                           Value m, int64_t n) {
  for (int64_t k = 0; k < n * n; ++k)
    kb.store(P[k], buf, kb.add(kb.mul(m, kb.idx(n * n)), kb.idx(k)));
}

SmallVector<Value> sinkhorn::concat(ArrayRef<Value> a, ArrayRef<Value> b) {
  SmallVector<Value> out(a.begin(), a.end());
  out.append(b.begin(), b.end());
  return out;
}

Value History::slot(Value k) { return kb.add(kb.mul(k, kb.idx(threads)), tid); }

void History::save(Value base, ArrayRef<Value> v) {
  for (size_t k = 0; k < v.size(); ++k)
    kb.store(v[k], smem, slot(kb.add(base, kb.idx(k))));
}

SmallVector<Value> History::restore(Value base, int64_t count) {
  SmallVector<Value> v;
  for (int64_t k = 0; k < count; ++k)
    v.push_back(kb.load(smem, slot(kb.add(base, kb.idx(k)))));
  return v;
}
