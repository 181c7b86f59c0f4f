"""Block shapes for the streaming forwards (aggregate, expand_combine), in CUDA C.

aggregate and expand_combine forward read x ([M, C, n] bf16, layout (C, n))
once and write once; both run at ~98% of the copy bandwidth, and TE's Triton
kernels are 1-4% faster. This probe times, in the bench's queued method and
beside TE and mhc, one kernel per op whose block covers BM tokens x BC
channels (8-channel chunks of 16-byte accesses, U chunks loaded before any is
used), so that the block shape can be chosen from measurements:
  - BM = 1, BC = C, T = 256, U = 1 is mhc's kernel today (a block per token);
  - small blocks over a (BM, BC) tile, blocks ordered along C first.
Each variant is checked against torch before it is timed.
For the GPU machine (after test/gpu/setup-gpu.sh):
    python3 bench/probes/stream_probe.py [--te PATH] [--M 32768 --C 7168]
"""

import argparse
import os
import sys

import cupy as cp
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (timeit, copy_bandwidth, load_te)

SRC = r"""
typedef unsigned int u32;
// -D: NT (threads), BM (tokens per block), BC (channels per block), UN (chunks
//     in flight per thread), CS (streaming stores), NA (L1::no_allocate loads)
#define CPR (BC / 8)
#define ITEMS (BM * CPR)
// Token m and row position q of item `it` of block (mb, cb), PER items a row.
#define ITEM_AT(it, PER, m, q) (m) = mb * BM + (it) / (PER); (q) = (long)cb * (PER) + (it) % (PER)
__device__ __forceinline__ float lo(u32 v) { return __uint_as_float(v << 16); }
__device__ __forceinline__ float hi(u32 v) { return __uint_as_float(v & 0xffff0000u); }
__device__ __forceinline__ u32 bf(float a) {  // round to nearest even
  u32 u = __float_as_uint(a);
  return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}
__device__ __forceinline__ u32 pack(float a, float b) { return bf(a) | (bf(b) << 16); }
__device__ __forceinline__ uint4 ldx(const uint4* p) {
#if NA
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
#else
  return __ldg(p);
#endif
}
__device__ __forceinline__ void sty(uint4* p, uint4 v) {
#if CS
  __stcs(p, v);
#else
  *p = v;
#endif
}

// y[m, c] = sum_i pre[m, i] x[m, c, i]  (n = 4)
extern "C" __global__ void __launch_bounds__(NT)
agg(const uint4* __restrict__ x, const float4* __restrict__ pre, uint4* __restrict__ y, int C) {
  const int CB = C / BC;
  long mb = blockIdx.x / CB; int cb = blockIdx.x % CB;
  for (int g = threadIdx.x; g < ITEMS; g += NT * UN) {
    uint4 v[UN][4]; float4 p[UN]; long m[UN], c8[UN];
#pragma unroll
    for (int u = 0; u < UN; ++u) {
      int it = g + u * NT;
      ITEM_AT(it, CPR, m[u], c8[u]);
      if (it < ITEMS) {
#pragma unroll
        for (int k = 0; k < 4; ++k) v[u][k] = ldx(x + m[u] * (C / 2) + c8[u] * 4 + k);
        p[u] = pre[m[u]];
      }
    }
#pragma unroll
    for (int u = 0; u < UN; ++u) {
      if (g + u * NT >= ITEMS) break;
      u32 o[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        float a = p[u].x * lo(v[u][k].x) + p[u].y * hi(v[u][k].x) + p[u].z * lo(v[u][k].y) + p[u].w * hi(v[u][k].y);
        float b = p[u].x * lo(v[u][k].z) + p[u].y * hi(v[u][k].z) + p[u].z * lo(v[u][k].w) + p[u].w * hi(v[u][k].w);
        o[k] = pack(a, b);
      }
      sty(y + m[u] * (C / 8) + c8[u], make_uint4(o[0], o[1], o[2], o[3]));
    }
  }
}

// out[m, c, j] = post[m, j] f[m, c] + sum_i P[m, i, j] x[m, c, i]  (n = 4)
extern "C" __global__ void __launch_bounds__(NT)
ec(const uint4* __restrict__ f, const float4* __restrict__ post, const uint4* __restrict__ x,
   const float4* __restrict__ P, uint4* __restrict__ out, int C) {
  const int CB = C / BC;
  long mb = blockIdx.x / CB; int cb = blockIdx.x % CB;
  for (int g = threadIdx.x; g < ITEMS; g += NT * UN) {
    uint4 v[UN][4], fv[UN]; long m[UN], c8[UN];
#pragma unroll
    for (int u = 0; u < UN; ++u) {
      int it = g + u * NT;
      ITEM_AT(it, CPR, m[u], c8[u]);
      if (it < ITEMS) {
#pragma unroll
        for (int k = 0; k < 4; ++k) v[u][k] = ldx(x + m[u] * (C / 2) + c8[u] * 4 + k);
        fv[u] = ldx(f + m[u] * (C / 8) + c8[u]);
      }
    }
#pragma unroll
    for (int u = 0; u < UN; ++u) {
      if (g + u * NT >= ITEMS) break;
      float4 q = post[m[u]], r0 = P[m[u] * 4], r1 = P[m[u] * 4 + 1], r2 = P[m[u] * 4 + 2], r3 = P[m[u] * 4 + 3];
      u32 fw[4] = {fv[u].x, fv[u].y, fv[u].z, fv[u].w};
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        u32 o[4];
#pragma unroll
        for (int h = 0; h < 2; ++h) {  // channel 2k + h
          u32 a = h ? v[u][k].z : v[u][k].x, b = h ? v[u][k].w : v[u][k].y;
          float x0 = lo(a), x1 = hi(a), x2 = lo(b), x3 = hi(b);
          float fc = h ? hi(fw[k]) : lo(fw[k]);
          float o0 = q.x * fc + r0.x * x0 + r1.x * x1 + r2.x * x2 + r3.x * x3;
          float o1 = q.y * fc + r0.y * x0 + r1.y * x1 + r2.y * x2 + r3.y * x3;
          float o2 = q.z * fc + r0.z * x0 + r1.z * x1 + r2.z * x2 + r3.z * x3;
          float o3 = q.w * fc + r0.w * x0 + r1.w * x1 + r2.w * x2 + r3.w * x3;
          o[2 * h] = pack(o0, o1); o[2 * h + 1] = pack(o2, o3);
        }
        sty(out + m[u] * (C / 2) + c8[u] * 4 + k, make_uint4(o[0], o[1], o[2], o[3]));
      }
    }
  }
}
// The same two ops with warp-contiguous accesses: item = one 16-byte piece of
// x (2 channels x 4 streams), consecutive threads on consecutive pieces, so a
// warp's load covers 512 contiguous bytes; y / f move as 4-byte words.
#define PPR (BC / 2)
#define PITEMS (BM * PPR)
extern "C" __global__ void __launch_bounds__(NT)
agg_wc(const uint4* __restrict__ x, const float4* __restrict__ pre, u32* __restrict__ y, int C) {
  const int CB = C / BC;
  long mb = blockIdx.x / CB; int cb = blockIdx.x % CB;
  for (int g = threadIdx.x; g < PITEMS; g += NT * UN) {
    uint4 v[UN]; float4 p[UN]; long m[UN], q[UN];
#pragma unroll
    for (int u = 0; u < UN; ++u) {
      int it = g + u * NT;
      ITEM_AT(it, PPR, m[u], q[u]);
      if (it < PITEMS) { v[u] = ldx(x + m[u] * (C / 2) + q[u]); p[u] = pre[m[u]]; }
    }
#pragma unroll
    for (int u = 0; u < UN; ++u) {
      if (g + u * NT >= PITEMS) break;
      float a = p[u].x * lo(v[u].x) + p[u].y * hi(v[u].x) + p[u].z * lo(v[u].y) + p[u].w * hi(v[u].y);
      float b = p[u].x * lo(v[u].z) + p[u].y * hi(v[u].z) + p[u].z * lo(v[u].w) + p[u].w * hi(v[u].w);
      y[m[u] * (C / 2) + q[u]] = pack(a, b);
    }
  }
}

extern "C" __global__ void __launch_bounds__(NT)
ec_wc(const u32* __restrict__ f, const float4* __restrict__ post, const uint4* __restrict__ x,
      const float4* __restrict__ P, uint4* __restrict__ out, int C) {
  const int CB = C / BC;
  long mb = blockIdx.x / CB; int cb = blockIdx.x % CB;
  for (int g = threadIdx.x; g < PITEMS; g += NT * UN) {
    uint4 v[UN]; u32 fv[UN]; long m[UN], q[UN];
#pragma unroll
    for (int u = 0; u < UN; ++u) {
      int it = g + u * NT;
      ITEM_AT(it, PPR, m[u], q[u]);
      if (it < PITEMS) { v[u] = ldx(x + m[u] * (C / 2) + q[u]); fv[u] = __ldg(f + m[u] * (C / 2) + q[u]); }
    }
#pragma unroll
    for (int u = 0; u < UN; ++u) {
      if (g + u * NT >= PITEMS) break;
      float4 w = post[m[u]], r0 = P[m[u] * 4], r1 = P[m[u] * 4 + 1], r2 = P[m[u] * 4 + 2], r3 = P[m[u] * 4 + 3];
      u32 o[4];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        u32 a = h ? v[u].z : v[u].x, b = h ? v[u].w : v[u].y;
        float x0 = lo(a), x1 = hi(a), x2 = lo(b), x3 = hi(b), fc = h ? hi(fv[u]) : lo(fv[u]);
        float o0 = w.x * fc + r0.x * x0 + r1.x * x1 + r2.x * x2 + r3.x * x3;
        float o1 = w.y * fc + r0.y * x0 + r1.y * x1 + r2.y * x2 + r3.y * x3;
        float o2 = w.z * fc + r0.z * x0 + r1.z * x1 + r2.z * x2 + r3.z * x3;
        float o3 = w.w * fc + r0.w * x0 + r1.w * x1 + r2.w * x2 + r3.w * x3;
        o[2 * h] = pack(o0, o1); o[2 * h + 1] = pack(o2, o3);
      }
      sty(out + m[u] * (C / 2) + q[u], make_uint4(o[0], o[1], o[2], o[3]));
    }
  }
}
"""

# (kernel suffix, T, BM, BC, U, NA): BC = 0 means C (a block per BM tokens).
VARIANTS = [
    ("", 256, 1, 0, 1, 0), ("", 256, 1, 0, 4, 0), ("", 64, 2, 256, 2, 0),
    ("_wc", 256, 1, 0, 1, 0), ("_wc", 256, 1, 0, 2, 0), ("_wc", 256, 1, 0, 4, 0), ("_wc", 256, 1, 0, 4, 1),
    ("_wc", 64, 2, 256, 4, 0), ("_wc", 128, 4, 256, 4, 0), ("_wc", 128, 2, 512, 4, 0), ("_wc", 256, 2, 1024, 4, 0),
    ("_wc", 128, 1, 1024, 4, 0), ("_wc", 256, 4, 512, 4, 0), ("_wc", 512, 1, 0, 2, 0),
    # flat blocks of consecutive items (mhc's forEachItem) where they divide C
    ("_wc", 256, 1, 2048, 4, 0), ("_wc", 256, 1, 4096, 8, 0), ("_wc", 128, 1, 2048, 8, 0),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--M", type=int, default=32768)
    ap.add_argument("--C", type=int, default=7168)
    ap.add_argument("--te", default=None)
    ap.add_argument("--ops", default="agg,ec")
    ap.add_argument("--only", default=None, help="only variants whose label contains this")
    a = ap.parse_args()
    M, C, n = a.M, a.C, 4
    torch.manual_seed(0)
    sets = []
    for _ in range(2):  # 2 x 2.8 GB: larger than L2 many times over
        x = torch.randn(M, C, n, device="cuda").to(torch.bfloat16)
        sets.append(dict(x=x, f=torch.randn(M, C, device="cuda").to(torch.bfloat16),
                         pre=torch.rand(M, n, device="cuda"), post=2 * torch.rand(M, n, device="cuda"),
                         P=torch.softmax(torch.randn(M, n, n, device="cuda"), -1)))
    bw = bench.copy_bandwidth()
    te = bench.load_te(a.te) if a.te and os.path.isdir(a.te) else None
    print(f"{torch.cuda.get_device_name()}: M={M} C={C} n=4 bf16, copy {bw / 1e12:.2f} TB/s")
    io = {"agg": (M * C * n + M * C) * 2, "ec": (2 * M * C * n + M * C) * 2}
    ref = {"agg": lambda s: (s["x"].float() * s["pre"][:, None, :]).sum(-1),
           "ec": lambda s: s["f"].float()[:, :, None] * s["post"][:, None, :]
           + (s["x"].float()[:, :, :, None] * s["P"][:, None, :, :]).sum(-2)}
    rows = []
    for op in a.ops.split(","):
        outs = [torch.empty(M, C, device="cuda", dtype=torch.bfloat16) if op == "agg"
                else torch.empty(M, C, n, device="cuda", dtype=torch.bfloat16) for _ in sets]
        peers = {}
        if op == "agg":
            peers["mhc"] = lambda s, o: bench.mhc.ops.aggregate(s["x"], s["pre"], layout="cn")
            if te:
                peers["TE"] = lambda s, o: te["aggregate"](s["x"], s["pre"])
        else:
            peers["mhc"] = lambda s, o: bench.mhc.ops.expand_combine(s["f"], s["post"], s["x"], s["P"], layout="cn")
            if te:
                peers["TE"] = lambda s, o: te["expand_combine"](s["f"], s["post"], s["x"], s["P"])
        for name, fn in peers.items():
            ms = bench.timeit(fn, [(s, o) for s, o in zip(sets, outs)], reps=20, ahead=True)
            rows.append((op, name, ms * 1e3, io[op] / (ms * 1e-3) / bw))
        for cs in (0, 1):
            for wc, T, BM, BC, U, na in VARIANTS:
                BCe = BC or C
                label = f"{wc or '_c'} T{T} BM{BM} BC{BC or 'C'} U{U}{' na' if na else ''}{' cs' if cs else ''}"
                if C % BCe or M % BM or (a.only and a.only not in label):
                    continue
                opts = tuple(f"-D{k}={v}" for k, v in dict(NT=T, BM=BM, BC=BCe, UN=U, CS=cs, NA=na).items())
                k = cp.RawKernel(SRC, op + wc, options=opts)
                grid = (M // BM) * (C // BCe)

                def run(s, o):
                    if op == "agg":
                        k((grid,), (T,), (s["x"].data_ptr(), s["pre"].data_ptr(), o.data_ptr(), cp.int32(C)))
                    else:
                        k((grid,), (T,), (s["f"].data_ptr(), s["post"].data_ptr(), s["x"].data_ptr(),
                                          s["P"].data_ptr(), o.data_ptr(), cp.int32(C)))
                run(sets[0], outs[0])
                torch.cuda.synchronize()
                err = ((outs[0].float() - ref[op](sets[0])).norm() / ref[op](sets[0]).norm()).item()
                assert err < 1e-2, (op, wc, T, BM, BC, U, err)
                ms = bench.timeit(run, [(s, o) for s, o in zip(sets, outs)], reps=20, ahead=True)
                rows.append((op, label, ms * 1e3,
                             io[op] / (ms * 1e-3) / bw))
    print(f"{'op':4} {'variant':30} {'us':>8} {'%SOL':>6}")
    for op, name, us, sol in rows:
        print(f"{op:4} {name:30} {us:8.1f} {100 * sol:6.1f}")


if __name__ == "__main__":
    main()
