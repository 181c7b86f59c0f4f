//===- Sinkhorn.cpp - doubly stochastic projection and gradient -----------===//
//
// One thread per token; the n x n matrix lives in registers. The backward is
// reverse mode through the T iterations: the forward is recomputed in the
// kernel and the per-iteration vectors it needs (log mode: the potentials
// f^t, g^t; softmax_eps mode: the row and column sums) are kept in shared
// memory, thread-minor so the accesses are conflict-free. softmax_eps steps
// are undone by multiplying back by (sum + eps). The log mode runs in base 2
// (ex2/lg2 instructions; see negLog2SumExp2).
//
//===----------------------------------------------------------------------===//

#include "kernels/Kernels.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"

using namespace mlir;
using namespace mlir::mhc;
using ::mhc::BufferRole;
using ::mhc::DType;
using ::mhc::SinkhornMode;

namespace {

/// -log2(sum_k 2^v_k), max-shifted. The log mode runs in base 2 (logits
/// scaled by log2(e) once): potentials are log2(e) times docs/MATH.md's, the
/// plans exp(L + f + g) = 2^(L2 + f2 + g2) are the same numbers, and each
/// exp/log is one ex2/lg2 instruction instead of a range-reduced libdevice
/// call (the kernel is issue-bound: 20 iterations x 2n^2 exponentials).
Value negLog2SumExp2(KernelBuilder &kb, ArrayRef<Value> v) {
  Value mx = v[0];
  for (size_t k = 1; k < v.size(); ++k)
    mx = kb.max(mx, v[k]);
  Value sum = kb.exp2(kb.sub(v[0], mx));
  for (size_t k = 1; k < v.size(); ++k)
    sum = kb.add(sum, kb.exp2(kb.sub(v[k], mx)));
  return kb.neg(kb.add(mx, kb.log2(sum)));
}

/// L * log2(e): the log mode's logits in base 2.
Value toBase2(KernelBuilder &kb, Value v) {
  return kb.mul(v, kb.f32(1.4426950408889634));
}
SmallVector<Value> toBase2(KernelBuilder &kb, ArrayRef<Value> L) {
  SmallVector<Value> out;
  for (Value v : L)
    out.push_back(toBase2(kb, v));
  return out;
}

/// -log2(sum_k 2^(a_k + b_k)): a potential from a row or column of L2 and
/// the other potential.
Value negLog2SumExp2Sum(KernelBuilder &kb, ArrayRef<Value> a, ArrayRef<Value> b) {
  SmallVector<Value> v = {kb.add(a[0], b[0])};
  for (size_t k = 1; k < a.size(); ++k)
    v.push_back(kb.add(a[k], b[k]));
  return negLog2SumExp2(kb, v);
}

/// Row i of the plan exp(L + f + g) from base-2 values: 2^((L2_ij + f_i) + g_j).
SmallVector<Value> planRow(KernelBuilder &kb, ArrayRef<Value> Lrow, Value fi,
                           ArrayRef<Value> g) {
  SmallVector<Value> P;
  for (size_t j = 0; j < Lrow.size(); ++j)
    P.push_back(kb.exp2(kb.add(kb.add(Lrow[j], fi), g[j])));
  return P;
}

struct Sinkhorn {
  KernelBuilder &kb;
  int64_t n;
  float eps;

  Value at(ArrayRef<Value> P, int64_t i, int64_t j) { return P[i * n + j]; }

  /// f_i = -LSE_j(L_ij + g_j) (base 2: L, f, g scaled by log2(e)).
  SmallVector<Value> rowPotential(ArrayRef<Value> L, ArrayRef<Value> g) {
    SmallVector<Value> f;
    for (int64_t i = 0; i < n; ++i)
      f.push_back(negLog2SumExp2Sum(kb, L.slice(i * n, n), g));
    return f;
  }
  /// g_j = -LSE_i(L_ij + f_i).
  SmallVector<Value> colPotential(ArrayRef<Value> L, ArrayRef<Value> f) {
    SmallVector<Value> g;
    for (int64_t j = 0; j < n; ++j) {
      SmallVector<Value> col;
      for (int64_t i = 0; i < n; ++i)
        col.push_back(L[i * n + j]);
      g.push_back(negLog2SumExp2Sum(kb, col, f));
    }
    return g;
  }
  /// exp(L_ij + f_i + g_j), from the base-2 values.
  SmallVector<Value> plan(ArrayRef<Value> L, ArrayRef<Value> f,
                          ArrayRef<Value> g) {
    SmallVector<Value> P;
    for (int64_t i = 0; i < n; ++i)
      P.append(planRow(kb, L.slice(i * n, n), f[i], g));
    return P;
  }

  /// The scaling (linear) form of the log mode: K = 2^(L2 - rowmax), and
  /// with u = e^(f + rowmax), v = e^g the iteration is u = 1 / (K v),
  /// v = 1 / (K^T u) and every plan exp(L + f + g) is K_ij u_i v_j: 2n
  /// reciprocals per iteration instead of 2n^2 exponentials and 2n logs.
  SmallVector<Value> kernelMatrix(ArrayRef<Value> L2) {
    return rowShiftedExp(L2, /*base2=*/true);
  }
  /// exp(L_ij - max_j L_ij) (or 2^(...)): every entry <= 1, no overflow.
  SmallVector<Value> rowShiftedExp(ArrayRef<Value> L, bool base2) {
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
  /// 1 / (K v) over rows (or 1 / (K^T u) over columns); `ok` turns false
  /// when a sum leaves [2^-100, 2^100] (or is NaN): the caller then redoes
  /// the token in the log domain, which has no range limit.
  SmallVector<Value> scale(ArrayRef<Value> K, ArrayRef<Value> w, bool rows,
                           Value &ok) {
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
  /// K_ij u_i v_j.
  SmallVector<Value> scaledPlan(ArrayRef<Value> K, ArrayRef<Value> u,
                                ArrayRef<Value> v) {
    SmallVector<Value> P;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j)
        P.push_back(kb.mul(kb.mul(K[i * n + j], u[i]), v[j]));
    return P;
  }

  SmallVector<Value> sums(ArrayRef<Value> P, bool rows) {
    SmallVector<Value> s;
    for (int64_t a = 0; a < n; ++a) {
      Value acc = rows ? P[a * n] : P[a];
      for (int64_t b = 1; b < n; ++b)
        acc = kb.add(acc, rows ? P[a * n + b] : P[b * n + a]);
      s.push_back(acc);
    }
    return s;
  }
  /// P / (sum + eps) along rows or columns, given the sums: n divisions
  /// and n^2 multiplications (a correctly rounded division is ~10
  /// instructions; x * (1/d) is within 1.5 ulp of x / d).
  SmallVector<Value> normalize(ArrayRef<Value> P, ArrayRef<Value> s,
                               bool rows) {
    return normalize(P, s, rows, eps);
  }
  SmallVector<Value> normalize(ArrayRef<Value> P, ArrayRef<Value> s,
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
  /// softmax_j(L) + eps.
  SmallVector<Value> softmaxPlusEps(ArrayRef<Value> L) {
    SmallVector<Value> S = softmax(L);
    for (Value &v : S)
      v = kb.add(v, kb.f32(eps));
    return S;
  }
  SmallVector<Value> softmax(ArrayRef<Value> L) {
    SmallVector<Value> e = rowShiftedExp(L, /*base2=*/false);
    return normalize(e, sums(e, /*rows=*/true), /*rows=*/true, /*eps=*/0.0f);
  }
};

SmallVector<Value> loadMatrix(KernelBuilder &kb, Value buf, Value m,
                              int64_t n) {
  SmallVector<Value> out;
  for (int64_t k = 0; k < n * n; ++k)
    out.push_back(kb.load(buf, kb.add(kb.mul(m, kb.idx(n * n)), kb.idx(k))));
  return out;
}

void storeMatrix(KernelBuilder &kb, ArrayRef<Value> P, Value buf, Value m,
                 int64_t n) {
  for (int64_t k = 0; k < n * n; ++k)
    kb.store(P[k], buf, kb.add(kb.mul(m, kb.idx(n * n)), kb.idx(k)));
}

SmallVector<Value> concat(ArrayRef<Value> a, ArrayRef<Value> b) {
  SmallVector<Value> out(a.begin(), a.end());
  out.append(b.begin(), b.end());
  return out;
}

} // namespace

void mlir::mhc::emitSinkhornPlan(KernelBuilder &kb,
                                 const ::mhc::KernelSpec &spec,
                                 ArrayRef<Value> logits,
                                 function_ref<void(ArrayRef<Value>)> store) {
  int64_t n = spec.n, T = spec.iters;
  Sinkhorn sk{kb, n, spec.eps};
  SmallVector<Value> L(logits.begin(), logits.end());
  if (spec.mode == SinkhornMode::Log) {
    L = toBase2(kb, L);
    // Scaling form first (MUFU-light); the log domain only for tokens
    // whose sums left the safe range.
    SmallVector<Value> K = sk.kernelMatrix(L);
    SmallVector<Value> ones(n, kb.f32(1.0));
    SmallVector<Value> init = concat(ones, ones);
    init.push_back(kb.boolean(true));
    SmallVector<Value> uv = kb.loop(
        kb.idx(0), kb.idx(T), kb.idx(1), init, [&](Value, ValueRange it) {
          SmallVector<Value> v(it.begin() + n, it.begin() + 2 * n);
          Value ok = it[2 * n];
          SmallVector<Value> u = sk.scale(K, v, true, ok);
          SmallVector<Value> next = concat(u, sk.scale(K, u, false, ok));
          next.push_back(ok);
          return next;
        });
    Value ok = uv[2 * n];
    kb.when(ok, [&] {
      store(sk.scaledPlan(K, ArrayRef<Value>(uv).take_front(n),
                          ArrayRef<Value>(uv).slice(n, n)));
    });
    kb.when(kb.select(ok, kb.boolean(false), kb.boolean(true)), [&] {
      SmallVector<Value> zero(n, kb.f32(0.0));
      SmallVector<Value> fg = kb.loop(
          kb.idx(0), kb.idx(T), kb.idx(1), concat(zero, zero),
          [&](Value, ValueRange it) {
            SmallVector<Value> g(it.begin() + n, it.end());
            SmallVector<Value> f = sk.rowPotential(L, g);
            return concat(f, sk.colPotential(L, f));
          });
      store(sk.plan(L, ArrayRef<Value>(fg).take_front(n),
                    ArrayRef<Value>(fg).drop_front(n)));
    });
    return;
  }
  SmallVector<Value> P = sk.softmaxPlusEps(L);
  P = sk.normalize(P, sk.sums(P, false), false);
  P = kb.loop(kb.idx(1), kb.idx(T), kb.idx(1), P, [&](Value, ValueRange it) {
    SmallVector<Value> Q(it.begin(), it.end());
    Q = sk.normalize(Q, sk.sums(Q, true), true);
    return sk.normalize(Q, sk.sums(Q, false), false);
  });
  store(P);
}

static LogicalResult buildForward(KernelContext &ctx) {
  int64_t n = ctx.n();
  ctx.buffer("logits", DType::F32, BufferRole::Input, {n * n, 0});
  ctx.buffer("P", DType::F32, BufferRole::Output, {n * n, 0});
  // One token per thread: M = 32768 is only 1024 warps, so small blocks
  // spread them over every SM.
  const int threads = 64;
  LaunchBuilder &l = ctx.launch("main");
  l.param("logits").param("P").param("M").block(threads).grid({threads, 0});
  KernelBuilder kb = ctx.begin(l);
  Value m = kb.add(kb.mul(kb.blockId(), kb.idx(threads)), kb.threadId());
  kb.when(kb.lt(m, l.tokens()), [&] {
    emitSinkhornPlan(kb, ctx.spec, loadMatrix(kb, l.arg("logits"), m, n),
                     [&](ArrayRef<Value> P) { storeMatrix(kb, P, l.arg("P"), m, n); });
  });
  return success();
}

namespace {
/// The backward's per-token iteration history in shared memory, thread-minor
/// so that the accesses are conflict-free: history[k] of this thread is
/// smem[k * threads + tid].
struct History {
  KernelBuilder &kb;
  Value smem, tid;
  int64_t threads;

  Value slot(Value k) { return kb.add(kb.mul(k, kb.idx(threads)), tid); }
  void save(Value base, ArrayRef<Value> v) {
    for (size_t k = 0; k < v.size(); ++k)
      kb.store(v[k], smem, slot(kb.add(base, kb.idx(k))));
  }
  SmallVector<Value> restore(Value base, int64_t count) {
    SmallVector<Value> v;
    for (int64_t k = 0; k < count; ++k)
      v.push_back(kb.load(smem, slot(kb.add(base, kb.idx(k)))));
    return v;
  }
};

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

/// The log mode's forward in the scaling form, saving u^t, v^t (2n floats
/// per iteration) at history[t * 2n]: returns u^T, v^T and `ok`, which is
/// false when a sum left the safe range.
SmallVector<Value> scalingForward(Sinkhorn &sk, History &history,
                                  ArrayRef<Value> K, int64_t T) {
  KernelBuilder &kb = sk.kb;
  int64_t n = sk.n;
  SmallVector<Value> start(2 * n, kb.f32(1.0));
  start.push_back(kb.boolean(true));
  return kb.loop(
      kb.idx(0), kb.idx(T), kb.idx(1), start,
      [&](Value t, ValueRange it) {
        SmallVector<Value> g(it.begin() + n, it.begin() + 2 * n);
        Value fine = it[2 * n];
        SmallVector<Value> u = sk.scale(K, g, true, fine);
        SmallVector<Value> next = concat(u, sk.scale(K, u, false, fine));
        history.save(kb.mul(t, kb.idx(2 * n)), next);
        next.push_back(fine);
        return next;
      });
}

/// Back through iteration t of the scaling form: G (n x n), ggt (n) and
/// gft (n) are the gradients of the logits, of g^t and of f^t; returns G,
/// the gradient of g^{t-1} and a zero gf for the iteration before.
SmallVector<Value> scalingReverseStep(Sinkhorn &sk, History &history,
                                      ArrayRef<Value> K, Value t,
                                      SmallVector<Value> G,
                                      ArrayRef<Value> ggt,
                                      SmallVector<Value> gft) {
  KernelBuilder &kb = sk.kb;
  int64_t n = sk.n;
  SmallVector<Value> cur = history.restore(kb.mul(t, kb.idx(2 * n)), 2 * n);
  ArrayRef<Value> f(cur.data(), n), g(cur.data() + n, n);
  // g^{t-1}: g = 0 (v = 1) before the first iteration.
  Value first = kb.eq(t, kb.idx(0));
  Value prevBase = kb.mul(kb.select(first, kb.idx(0), kb.sub(t, kb.idx(1))), kb.idx(2 * n));
  SmallVector<Value> prev = history.restore(prevBase, 2 * n);
  SmallVector<Value> gPrev;
  for (int64_t j = 0; j < n; ++j)
    gPrev.push_back(kb.select(first, kb.f32(1.0), prev[n + j]));
  // g^t_j = -LSE_i(L_ij + f^t_i): A = exp(L + f^t + g^t).
  SmallVector<Value> A = sk.scaledPlan(K, f, g);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      Value d = kb.mul(ggt[j], A[i * n + j]);
      G[i * n + j] = kb.sub(G[i * n + j], d);
      gft[i] = kb.sub(gft[i], d);
    }
  // f^t_i = -LSE_j(L_ij + g^{t-1}_j): B = exp(L + g^{t-1} + f^t).
  SmallVector<Value> B = sk.scaledPlan(K, f, gPrev);
  SmallVector<Value> ggPrev(n, kb.f32(0.0));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      Value d = kb.mul(gft[i], B[i * n + j]);
      G[i * n + j] = kb.sub(G[i * n + j], d);
      ggPrev[j] = kb.sub(ggPrev[j], d);
    }
  SmallVector<Value> zeroF(n, kb.f32(0.0));
  return concat(concat(G, ggPrev), zeroF);
}

/// The gradient through the log mode, with the forward run in the scaling
/// form (plans K_ij u_i v_j); `ok` turns false when a sum leaves the safe
/// range.
SmallVector<Value> scalingGrad(Sinkhorn &sk, History &history,
                               ArrayRef<Value> K, ArrayRef<Value> gP,
                               int64_t T, Value *ok) {
  KernelBuilder &kb = sk.kb;
  int64_t n = sk.n;
  SmallVector<Value> fg = scalingForward(sk, history, K, T);
  *ok = fg[2 * n];
  SmallVector<Value> P = sk.scaledPlan(K, ArrayRef<Value>(fg).take_front(n),
                                       ArrayRef<Value>(fg).slice(n, n));
  // Through P = exp(f + L + g).
  SmallVector<Value> gL0, gf(n, kb.f32(0.0)), gg(n, kb.f32(0.0));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      Value d = kb.mul(gP[i * n + j], P[i * n + j]);
      gL0.push_back(d);
      gf[i] = kb.add(gf[i], d);
      gg[j] = kb.add(gg[j], d);
    }
  // Iterations T..1, as t' = T-1..0 with f^t at history[t'*2n].
  SmallVector<Value> init = concat(concat(gL0, gg), gf);
  SmallVector<Value> out = kb.loop(
      kb.idx(0), kb.idx(T), kb.idx(1), init, [&](Value r, ValueRange it) {
        Value t = kb.sub(kb.idx(T - 1), r);
        SmallVector<Value> G(it.begin(), it.begin() + n * n);
        SmallVector<Value> ggt(it.begin() + n * n, it.begin() + n * n + n);
        SmallVector<Value> gft(it.begin() + n * n + n, it.end());
        return scalingReverseStep(sk, history, K, t, std::move(G), ggt,
                                  std::move(gft));
      });
  out.resize(n * n);
  return out;
}

/// The log mode's gradient of token m into glogits: the scaling form, and
/// the log domain for the tokens whose sums left its safe range.
void emitLogModeGrad(Sinkhorn &sk, History &history, LaunchBuilder &l,
                     Value m, ArrayRef<Value> L, ArrayRef<Value> gP, int64_t T) {
  KernelBuilder &kb = sk.kb;
  int64_t n = sk.n;
  // Base 2 (see negLog2SumExp2): the plans below are docs/MATH.md's.
  SmallVector<Value> K = sk.kernelMatrix(toBase2(kb, L));
  Value ok;
  SmallVector<Value> fast = scalingGrad(sk, history, K, gP, T, &ok);
  kb.when(ok, [&] { storeMatrix(kb, fast, l.arg("glogits"), m, n); });
  kb.when(kb.select(ok, kb.boolean(false), kb.boolean(true)), [&] {
    LogDomainGrad{kb, n, T, l.arg("logits"), l.arg("gP"), l.arg("glogits"),
                  m, history}
        .emit();
  });
}

/// Back through y = x / (s + eps): gx = (gy - sum(gy*y)) / (s + eps)
/// along the normalised axis (rows or columns), then x = y * (s + eps).
void undoNormalize(Sinkhorn &sk, SmallVector<Value> &Y,
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
SmallVector<Value> softmaxEpsForward(Sinkhorn &sk, History &history,
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

/// The softmax_eps mode's gradient of the logits L: the forward recomputed,
/// each normalisation undone in reverse, then back through the softmax.
SmallVector<Value> softmaxEpsGrad(Sinkhorn &sk, History &history,
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
} // namespace

static LogicalResult buildBackward(KernelContext &ctx) {
  int64_t n = ctx.n(), T = ctx.spec.iters;
  int64_t hist = ::mhc::sinkhornHistoryFloats(ctx.spec);
  ctx.buffer("gP", DType::F32, BufferRole::Input, {n * n, 0});
  ctx.buffer("logits", DType::F32, BufferRole::Input, {n * n, 0});
  ctx.buffer("glogits", DType::F32, BufferRole::Output, {n * n, 0});
  // As many threads as the history leaves room for (unsupportedReason
  // checks that a warp's worth fits), at most 64.
  int64_t fit = ::mhc::kSinkhornHistoryBytes / (hist * 4);
  const int threads = static_cast<int>(std::min<int64_t>(64, (fit / 32) * 32));
  LaunchBuilder &l = ctx.launch("main");
  l.param("gP").param("logits").param("glogits").param("M").block(threads)
      .grid({threads, 0}).sharedF32(threads * hist);
  KernelBuilder kb = ctx.begin(l);
  Sinkhorn sk{kb, n, ctx.spec.eps};
  Value tid = kb.threadId();
  History history{kb, l.shared(), tid, threads};
  Value m = kb.add(kb.mul(kb.blockId(), kb.idx(threads)), tid);
  kb.when(kb.lt(m, l.tokens()), [&] {
    SmallVector<Value> L = loadMatrix(kb, l.arg("logits"), m, n);
    SmallVector<Value> gP = loadMatrix(kb, l.arg("gP"), m, n);
    if (ctx.spec.mode == SinkhornMode::Log) {
      emitLogModeGrad(sk, history, l, m, L, gP, T);
      return;
    }
    storeMatrix(kb, softmaxEpsGrad(sk, history, L, gP, T), l.arg("glogits"), m, n);
  });
  return success();
}

LogicalResult mlir::mhc::buildSinkhorn(KernelContext &ctx) {
  // One thread's scalar f32 chain: before sm_100 (no f32x2) the SLP
  // vectorizer finds nothing here (the PTX of every sm_80 and sm_90a spec,
  // n = 2 .. 8, both modes, is the same without it) and took 30% of the
  // n = 8 backward's cold JIT.
  ctx.llvmSLP = ctx.spec.arch.rfind("sm_100", 0) == 0;
  return ctx.spec.dir == ::mhc::Direction::Forward ? buildForward(ctx)
                                                   : buildBackward(ctx);
}
