"""Spread of Sinkhorn's relative error over many seeds (a diagnostic, not a test).

For small problems (n = 2, M = 1: a single 2x2 gradient) the norm-relative
error against float64 depends on the inputs' conditioning. This prints, per
mode and direction, the error quantiles of the CUDA kernel and of the fp32
ATen reference (torch.ops.mhc.* on CPU) on the same inputs, raw and divided by max(1, kappa)
(kernels.cancellation): if the kernel's tail matches the fp32 reference's and
vanishes once divided by kappa, the tail is the problem's conditioning in
fp32, not the kernel's arithmetic.

    python test/gpu/sinkhorn_error_spread.py [--seeds 2000] [--n 2] [--M 1]
"""

import argparse
import os
import sys

import torch

import mhc  # noqa: F401  (registers torch.ops.mhc)

sys.path.insert(0, os.path.dirname(__file__))
from kernels import cancellation, make_inputs, reference  # noqa: E402


def rel(got, want):
    g, w = got.reshape(-1).double().cpu(), want.detach().reshape(-1).double().cpu()
    return ((g - w).norm() / w.norm().clamp_min(1e-300)).item()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=2000)
    ap.add_argument("--n", type=int, default=2)
    ap.add_argument("--M", type=int, default=1)
    a = ap.parse_args()
    print(f"{'mode':12s} {'dir':4s} {'impl':10s} {'median':>9s} {'p99':>9s} {'p99.9':>9s} {'max':>9s}")
    for mode in ("log", "softmax_eps"):
        eps = 1e-6 if mode == "softmax_eps" else 0.0
        s = dict(op="sinkhorn", n=a.n, mode=mode, iters=20, eps=eps)
        for d in ("fwd", "bwd"):
            s["dir"] = d
            errs = {"cuda": [], "cpu fp32": [], "cuda/kappa": [], "cpu/kappa": []}
            for seed in range(a.seeds):
                t = make_inputs(s, a.M, torch.Generator(device="cuda").manual_seed(seed))
                want = reference(s, t)
                kappa = max(1.0, cancellation(s, t, want))
                for impl, dev in (("cuda", "cuda"), ("cpu fp32", "cpu")):
                    u = {k: v.to(dev) for k, v in t.items()}
                    if d == "fwd":
                        got = {"P": torch.ops.mhc.sinkhorn(u["logits"], a.n, mode, 20, eps)}
                    else:
                        got = {"glogits": torch.ops.mhc.sinkhorn_backward(u["gP"], u["logits"], a.n, mode, 20, eps)}
                    err = max(rel(got[k], want[k]) for k in got)
                    errs[impl].append(err)
                    errs["cuda/kappa" if dev == "cuda" else "cpu/kappa"].append(err / kappa)
            for impl, e in errs.items():
                q = torch.tensor(e, dtype=torch.float64).quantile(torch.tensor([0.5, 0.99, 0.999, 1.0],
                                                                                dtype=torch.float64))
                print(f"{mode:12s} {d:4s} {impl:10s} " + " ".join(f"{v:9.2e}" for v in q.tolist()))


if __name__ == "__main__":
    main()
