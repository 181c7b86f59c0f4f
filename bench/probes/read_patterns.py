"""Read-only DRAM rate of the access patterns a projection kernel can use.

The projection forward only reads x ([M, K] bf16, K = n*C); its % of SOL is
bounded by how fast the H100 streams x in the pattern the kernel uses. This
probe reads such a matrix (summing to defeat dead-code elimination) with:
  - stream: every thread walks 16-byte vectors, grid-stride (the best case);
  - tile R/W/lay: a warp owns R rows and walks its share of K, W bytes per
    row per step; lay "coal" puts consecutive lanes on consecutive 16 bytes
    of a row, lay "mma" gives lane (g, t) 2W/128 contiguous 16-byte pieces
    of rows g + 8j (the mma A-fragment layout the forward uses today).
For the GPU machine (cupy):  python3 bench/probes/read_patterns.py [--M 32768 --K 28672]
"""

import argparse
import statistics

import cupy as cp

SRC = r"""
#ifdef R
extern "C" __global__ void __launch_bounds__(128)
tile(const uint4* __restrict__ x, float* __restrict__ out, long M, long K8, int S) {
  // K8: row length in 16-byte pieces. R rows per warp, W16 pieces per row per step.
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  long mBlock = blockIdx.x / S; int split = blockIdx.x % S;
  long row0 = (mBlock * 4 + warp) * R;
  long steps = K8 / W16, b = split * steps / S, e = (split + 1) * steps / S;
  unsigned acc = 0;
  for (long st = b; st < e; ++st) {
    uint4 v[PER];
#pragma unroll
    for (int i = 0; i < PER; ++i) {
      int p, r, c;
      if (MMA) {            // lane (g, t): row g + 8 (i / (PER / (R / 8))), its contiguous pieces
        int perRow = PER / (R / 8); int g = lane >> 2, t = lane & 3;
        r = g + 8 * (i / perRow); c = t * perRow + i % perRow;
      } else {
        p = lane + 32 * i; r = p / W16; c = p % W16;
      }
      long row = row0 + r; if (row >= M) row = M - 1;
      v[i] = __ldg(x + row * K8 + st * W16 + c);
    }
#pragma unroll
    for (int i = 0; i < PER; ++i) acc += v[i].x ^ v[i].y ^ v[i].z ^ v[i].w;
  }
  out[blockIdx.x * 128 + threadIdx.x] = (float)acc;
}
#endif

extern "C" __global__ void __launch_bounds__(256)
stream(const uint4* __restrict__ x, float* __restrict__ out, long n) {
  unsigned acc = 0;
  for (long i = blockIdx.x * 256L + threadIdx.x; i < n; i += (long)gridDim.x * 256 * 4) {
    uint4 v[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) { long k = i + (long)j * gridDim.x * 256; v[j] = k < n ? x[k] : make_uint4(0,0,0,0); }
#pragma unroll
    for (int j = 0; j < 4; ++j) acc += v[j].x ^ v[j].y ^ v[j].z ^ v[j].w;
  }
  out[blockIdx.x * 256 + threadIdx.x] = (float)acc;
}
"""


def time_us(fn, reps=20):
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    for _ in range(3):
        fn()
    ts = []
    for _ in range(reps):
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        ts.append(cp.cuda.get_elapsed_time(start, stop) * 1e3)
    return statistics.median(ts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--M", type=int, default=32768)
    ap.add_argument("--K", type=int, default=28672)
    ap.add_argument("--copy-tbs", type=float, default=3.02, help="copy bandwidth for the % column")
    a = ap.parse_args()
    M, K = a.M, a.K
    x = cp.random.randint(0, 1 << 16, size=(M, K), dtype=cp.uint16)
    nbytes = x.nbytes
    K8 = K * 2 // 16
    out = cp.empty(1 << 22, dtype=cp.float32)
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    print(f"{cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}: read {nbytes / 1e9:.2f} GB ([{M}, {K}] bf16)")
    rows = []
    for blocks in (sms * 8, sms * 16, sms * 32):
        k = cp.RawKernel(SRC, "stream")
        n = nbytes // 16
        us = time_us(lambda: k((blocks,), (256,), (x, out, cp.int64(n))))
        rows.append((f"stream grid={blocks}", us))
    for R, W, lay in [(32, 128, "mma"), (32, 128, "coal"), (16, 256, "coal"), (16, 256, "mma"),
                      (16, 512, "coal"), (8, 512, "coal"), (8, 1024, "coal"), (32, 256, "coal"),
                      (16, 128, "coal")]:
        W16 = W // 16
        PER = R * W16 // 32
        opts = (f"-DR={R}", f"-DW16={W16}", f"-DPER={PER}", f"-DMMA={1 if lay == 'mma' else 0}")
        mod = cp.RawModule(code=SRC, options=opts)
        k = mod.get_function("tile")
        tokenBlocks = (M + 4 * R - 1) // (4 * R)
        for S in (1, 2, 4):
            grid = tokenBlocks * S
            if grid * 128 > out.size:
                continue
            us = time_us(lambda: k((grid,), (128,), (x, out, cp.int64(M), cp.int64(K8), cp.int32(S))))
            rows.append((f"tile R={R} W={W} {lay} S={S} grid={grid}", us))
            # At most 4 blocks (16 warps) per SM, like the register-bound kernel.
            k.max_dynamic_shared_size_bytes = 50 * 1024
            us = time_us(lambda: k((grid,), (128,), (x, out, cp.int64(M), cp.int64(K8), cp.int32(S)),
                                   shared_mem=50 * 1024))
            rows.append((f"tile R={R} W={W} {lay} S={S} grid={grid} 4/SM", us))
    print(f"{'pattern':44s} {'us':>8s} {'TB/s':>6s} {'% copy':>7s}")
    for name, us in rows:
        tbs = nbytes / us / 1e6
        print(f"{name:44s} {us:8.1f} {tbs:6.2f} {100 * tbs / a.copy_tbs:6.1f}%")


if __name__ == "__main__":
    main()
