"""Seam backward probe (issue 34): the device time of each kernel of one
torch.ops.mhc.post_pre_backward (and of post_pre_saved, for scale) at the
stack benchmark's conventions (n = 4, bf16, (C, n), tf32, no weight, no
bias), median over calls, and the sum against the backward's traffic floor
(3n + 3)*2*M*C bytes at the given bandwidth. Prints a table; writes nothing.

    python3 bench/probes/seam_bwd_kernels.py [--shape 32768,7168] [--calls 10] [--tbs 3.0]
"""
import argparse
import os
import statistics
import sys

import torch

import mhc  # noqa: F401  (registers torch.ops.mhc)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from kernel_times import device_times  # noqa: E402

ATTRS = (4, "cn", True, 1.1920929e-07, 0.0, 2.0, "log", 20, 0.0)  # n, layout, tf32, eps.., mode, iters, eps


def seam_inputs(M, C, n=4):
    N, K = 2 * n + n * n, n * C
    bf = dict(device="cuda", dtype=torch.bfloat16)
    return (torch.randn(M, C, **bf), 2 * torch.sigmoid(torch.randn(M, n, device="cuda")),
            torch.randn(M, C, n, **bf), torch.softmax(torch.randn(M, n, n, device="cuda"), -2), None,
            torch.randn(N, K, device="cuda") * K ** -0.5, torch.rand(3, device="cuda") + 0.5,
            torch.randn(N, device="cuda") * 0.5, None)


def kernel_times(fn, calls):
    """{kernel name: its device microseconds per call of fn()}, median over the calls."""
    times = device_times(fn, calls)
    return {k: statistics.median(v) * len(v) / calls for k, v in times.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="32768,7168", metavar="M,C")
    ap.add_argument("--calls", type=int, default=10)
    ap.add_argument("--tbs", type=float, default=3.0, help="copy bandwidth for the floor, TB/s")
    a = ap.parse_args()
    M, C = (int(v) for v in a.shape.split(","))
    fwd = seam_inputs(M, C)
    o = torch.ops.mhc
    with torch.no_grad():
        x_next, h, ms, pre, post_next, logits, P_next, y = o.post_pre_saved(*fwd, *ATTRS)
    gouts = (torch.randn_like(x_next), torch.randn_like(y), torch.randn_like(post_next), torch.randn_like(P_next))
    args = (*gouts, *fwd[:5], x_next, h, ms, pre, logits, *fwd[5:], *ATTRS)
    floor_us = (3 * 4 + 3) * 2 * M * C / (a.tbs * 1e12) * 1e6
    print(f"{torch.cuda.get_device_name()}, n=4 M={M} C={C} bf16 cn tf32; median of {a.calls} calls; "
          f"backward floor {floor_us:.0f} us at {a.tbs} TB/s")
    for label, fn in (("post_pre_saved", lambda: o.post_pre_saved(*fwd, *ATTRS)),
                      ("post_pre_backward", lambda: o.post_pre_backward(*args))):
        times = kernel_times(fn, a.calls)
        for name, us in sorted(times.items(), key=lambda kv: -kv[1]):
            short = name if len(name) < 80 else name[:77] + "..."
            print(f"  {label:18s} {short:80s} {us:9.1f} us")
        print(f"  {label:18s} {'total':80s} {sum(times.values()):9.1f} us")


if __name__ == "__main__":
    main()
