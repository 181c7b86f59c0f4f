// How fast a kernel can copy 1 GiB on this GPU depending on how long its
// blocks live and in what order they touch memory (docs/design/streams.md,
// pacing): short blocks in memory
// order, the same scattered, the projection backward's tiles (rows of
// 512 bytes of a [32768, 16384] bf16 matrix) as short blocks in two orders,
// a contiguous chunk per long-lived block, and persistent grid-stride copies
// free or held together by a global progress counter (a bounded wait).
// On the GPU machine:
//   nvcc -gencode arch=compute_90a,code=sm_90a -O3 -o /tmp/copy_locality \
//     bench/probes/copy_locality.cu && /tmp/copy_locality
#include <cuda_runtime.h>
#include <cstdio>
#include <vector>
#include <algorithm>
__global__ void __launch_bounds__(256) shortb(const uint4* __restrict__ x, uint4* __restrict__ y, unsigned nb, unsigned P) {
  size_t blk = ((size_t)blockIdx.x * P) % nb;
  size_t i = blk * 256 + threadIdx.x;
  y[i] = x[i];
}
// One tile (T rows x 512 B) per block; K columns (bf16) per row.
__global__ void __launch_bounds__(256) tileb(const uint4* __restrict__ x, uint4* __restrict__ y, int slices, int steps,
                                             int sliceFast, int T, int kp) {
  int slice, step;
  if (sliceFast) slice = blockIdx.x % slices, step = blockIdx.x / slices;
  else step = blockIdx.x % steps, slice = blockIdx.x / steps;
  for (int p = threadIdx.x; p < T * 32; p += 256) {
    size_t r = (size_t)step * T + p / 32;
    size_t i = r * kp + slice * 32 + p % 32;
    y[i] = x[i];
  }
}
// A contiguous chunk per (long-lived) block.
__global__ void __launch_bounds__(256) chunk(const uint4* __restrict__ x, uint4* __restrict__ y, size_t n) {
  size_t per = (n + gridDim.x - 1) / gridDim.x, b0 = blockIdx.x * per, e = min(n, b0 + per);
  for (size_t i = b0 + threadIdx.x; i < e; i += 4 * 256) {
    uint4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) if (i + u * 256 < e) v[u] = x[i + u * 256];
#pragma unroll
    for (int u = 0; u < 4; ++u) if (i + u * 256 < e) y[i + u * 256] = v[u];
  }
}
// Persistent grid-stride with a loose lockstep: every `every` iterations a
// block waits until all blocks have finished iteration it - lag.
__global__ void __launch_bounds__(256) gsl(const uint4* __restrict__ x, uint4* __restrict__ y, size_t n, unsigned* cnt,
                                           int every, int lag, int minIt) {
  size_t stride = (size_t)gridDim.x * blockDim.x;
  size_t i0 = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  int it = 0;
  for (size_t i = i0; i + 3 * stride < n; i += 4 * stride, ++it) {
    if (every && it < minIt && it % every == 0 && it >= lag * every) {
      if (threadIdx.x == 0) {
        unsigned want = (unsigned)(it / every - lag + 1) * gridDim.x;
        volatile unsigned* c = cnt;
        for (int k = 0; (int)(*c - want) < 0 && k < 2000000; ++k) __nanosleep(100);
      }
      __syncthreads();
    }
    uint4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) v[u] = x[i + u * stride];
#pragma unroll
    for (int u = 0; u < 4; ++u) y[i + u * stride] = v[u];
    if (every && it < minIt && it % every == every - 1) {
      __syncthreads();
      if (threadIdx.x == 0) atomicAdd(cnt, 1u);
    }
  }
}
int main() {
  size_t bytes = (size_t)32768 * 16384 * 2, n = bytes / 16;
  uint4 *x, *y; cudaMalloc(&x, bytes); cudaMalloc(&y, bytes); cudaMemset(x, 1, bytes);
  unsigned* cnt; cudaMalloc(&cnt, 4); cudaMemset(cnt, 0, 4);
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
  float ms; std::vector<float> v;
  auto med = [&](auto launch) {
    v.clear();
    for (int r = 0; r < 9; ++r) { cudaEventRecord(a); launch(); cudaEventRecord(b); cudaEventSynchronize(b); cudaEventElapsedTime(&ms, a, b); v.push_back(ms); }
    std::sort(v.begin(), v.end()); return v[4] * 1000;
  };
  auto rep = [&](const char* what, float t) { printf("%-52s %7.1f us %.3f TB/s\n", what, t, 2.0 * bytes / t / 1e6); };
  unsigned nb = (unsigned)(n / 256);
  rep("cudaMemcpy D2D", med([&] { cudaMemcpyAsync(y, x, bytes, cudaMemcpyDeviceToDevice); }));
  rep("short blocks, linear", med([&] { shortb<<<nb, 256>>>(x, y, nb, 1); }));
  rep("short blocks, scattered (P = 7919)", med([&] { shortb<<<nb, 256>>>(x, y, nb, 7919); }));
  rep("short blocks, scattered (P = 65)", med([&] { shortb<<<nb, 256>>>(x, y, nb, 65); }));
  for (int T : {8, 64}) {
    int K = 16384, kp = K / 8, slices = K / 256, steps = 32768 / T;
    char s[96];
    snprintf(s, 96, "tile blocks %d x 512 B, slice-fastest", T);
    rep(s, med([&] { tileb<<<slices * steps, 256>>>(x, y, slices, steps, 1, T, kp); }));
    snprintf(s, 96, "tile blocks %d x 512 B, step-fastest", T);
    rep(s, med([&] { tileb<<<slices * steps, 256>>>(x, y, slices, steps, 0, T, kp); }));
  }
  for (int g : {264, 1056}) {
    char s[96];
    snprintf(s, 96, "contiguous chunk per block, %d blocks", g);
    rep(s, med([&] { chunk<<<g, 256>>>(x, y, n); }));
  }
  for (int g : {264, 396}) {
    char s[96];
    snprintf(s, 96, "grid-stride x4, %d blocks, free", g);
    rep(s, med([&] { gsl<<<g, 256>>>(x, y, n, cnt, 0, 0, 0); }));
    for (int every : {1, 4, 16}) for (int lag : {1, 2}) {
      snprintf(s, 96, "grid-stride x4, %d blocks, lockstep every %d lag %d", g, every, lag);
      int minIt = (int)(n / (4 * (size_t)g * 256));
      rep(s, med([&] { cudaMemsetAsync(cnt, 0, 4); gsl<<<g, 256>>>(x, y, n, cnt, every, lag, minIt); }));
    }
  }
  printf("%s\n", cudaGetErrorString(cudaGetLastError()));
}
