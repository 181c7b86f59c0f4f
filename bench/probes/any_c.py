"""Any C (issue 35): the projection at K = n*C not a multiple of 8 against
the aligned C next to it, bytes-normalised.

Times torch.ops.mhc.project (forward) and project_backward at C = 5129 vs
5120 and 7167 vs 7168 (by default), n = 4, M = 32768, bf16 x, f32 phi, and
reports each call's time, its bytes per second (the bytes it must move: x
read, plus gx written by the backward, plus phi / gphi) and the odd C's
speed as a fraction of the aligned C's (target: >= 0.90). It also checks
that every timed call ran a generated kernel (mhc._C.stats()).

    python3 bench/probes/any_c.py [--pairs 5129:5120,7167:7168] [--n 4] [--M 32768]
                                  [--act bf16] [--tf32 1] [--weight 0] [--layout cn]
"""

import argparse

import torch

import mhc

DT = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}


def time_us(fn, iters=50, warmup=10):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    best = float("inf")
    for _ in range(5):
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) * 1000.0 / iters)
    return best


def measure(a, C):
    n, M, act = a.n, a.M, DT[a.act]
    K, N = n * C, 2 * n + n * n
    gen = torch.Generator(device="cuda").manual_seed(C)
    shape = (M, C, n) if a.layout == "cn" else (M, n, C)
    x = torch.randn(*shape, generator=gen, device="cuda").to(act)
    phi = torch.randn(N, K, generator=gen, device="cuda") / K ** 0.5
    w = (1 + 0.1 * torch.randn(K, generator=gen, device="cuda")) if a.weight else None
    gh = torch.randn(M, N, generator=gen, device="cuda")
    gms = torch.randn(M, generator=gen, device="cuda")
    o = torch.ops.mhc
    fwd = lambda: o.project(x, phi, w, n, a.layout, bool(a.tf32))  # noqa: E731
    bwd = lambda: o.project_backward(gh, gms, x, phi, w, n, a.layout, bool(a.tf32))  # noqa: E731
    before = mhc._C.stats()
    out = {"fwd": time_us(fwd), "bwd": time_us(bwd)}
    torch.cuda.synchronize()
    after = mhc._C.stats()
    assert after["reference_calls"] == before["reference_calls"], f"C={C} ran the reference path"
    xb, pb = M * K * x.element_size(), N * K * 4 + (K * 4 if a.weight else 0)
    moved = {"fwd": xb + pb, "bwd": 2 * xb + 2 * pb + M * (N + 1) * 4}
    return {d: (out[d], moved[d] / out[d] / 1e3) for d in out}  # (us, GB/s)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--pairs", default="5129:5120,7167:7168", help="odd:aligned C pairs")
    p.add_argument("--n", type=int, default=4)
    p.add_argument("--M", type=int, default=32768)
    p.add_argument("--act", default="bf16", choices=DT)
    p.add_argument("--tf32", type=int, default=1)
    p.add_argument("--weight", type=int, default=0)
    p.add_argument("--layout", default="cn", choices=("cn", "nc"))
    a = p.parse_args()
    print(f"device: {torch.cuda.get_device_name()}  n={a.n} M={a.M} act={a.act} tf32={a.tf32} "
          f"weight={a.weight} layout={a.layout}")
    for pair in a.pairs.split(","):
        odd, aligned = (int(v) for v in pair.split(":"))
        r_odd, r_al = measure(a, odd), measure(a, aligned)
        for d in ("fwd", "bwd"):
            (t1, g1), (t0, g0) = r_odd[d], r_al[d]
            print(f"project.{d} C={odd} (K%8={a.n * odd % 8}): {t1:8.1f} us {g1:7.1f} GB/s | "
                  f"C={aligned}: {t0:8.1f} us {g0:7.1f} GB/s | ratio {g1 / g0:.3f}")


if __name__ == "__main__":
    main()
