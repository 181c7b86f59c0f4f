"""Seam forward probe (issue 34): the device time of each kernel of the fused
post_pre.fwd (n = 4, bf16, (C, n), tf32, no weight or bias: the stack
benchmark's conventions) as built by one or more kernel compilers, e.g. main's
mhc-compile against a branch's. Each compiler's bundle runs through
test/gpu/kernels.py's Bundle (no runtime, no extension); rounds of 5 calls per
compiler interleave, 3 rounds, median per kernel under the torch profiler.
Every compiler's outputs are compared bitwise with the first one's. Prints a
table; writes nothing. docs/design/seam.md, "Loads a chunk ahead", has its
H100 numbers.

    python3 bench/probes/seam_fwd_compilers.py [NAME=COMPILER ...] [--shape 32768,7168] [--tbs 3.02]
                                               [--n 4] [--layout cn]

Without NAME=COMPILER: $MHC_COMPILER alone (test/gpu/setup-gpu.sh sets it).
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile

import torch

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path[:0] = [os.path.join(ROOT, "test", "gpu"), os.path.join(ROOT, "bench")]
from kernels import Bundle  # noqa: E402
from kernel_times import device_times  # noqa: E402


def spec(C, n=4, layout="cn"):
    return (f"post_pre.fwd;n={n};act=bf16;param=f32;layout={layout};C={C};tf32=1;weight=0;norm_eps=1.1920929e-07;"
            "pre_eps=0;post_mult=2;mode=log;iters=20;bias=0;arch=sm_90a")


def bundle(compiler, out, s):
    r = subprocess.run([compiler, "--spec", s, "-o", out], capture_output=True, text=True, check=True)
    return Bundle(r.stdout.strip() + ".json")


def inputs(M, C, n=4):
    N, K = 2 * n + n * n, n * C
    g = torch.Generator(device="cuda").manual_seed(1)

    def rnd(*shape):
        return torch.randn(*shape, generator=g, device="cuda")

    return dict(f=rnd(M, C).to(torch.bfloat16), post=2 * torch.sigmoid(rnd(M, n)),
                x=rnd(M * C * n).to(torch.bfloat16), P=torch.softmax(rnd(M, n, n), -2),
                phi=rnd(N * K) * K ** -0.5, alpha=torch.rand(3, generator=g, device="cuda") + 0.5,
                beta=rnd(N) * 0.5)


def bits(t):
    return t.view(torch.int16 if t.element_size() == 2 else torch.int32)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("compilers", nargs="*", metavar="NAME=COMPILER")
    ap.add_argument("--shape", default="32768,7168", metavar="M,C")
    ap.add_argument("--tbs", type=float, default=3.02, help="copy bandwidth for the floor, TB/s")
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--layout", default="cn", choices=["cn", "nc"])
    a = ap.parse_args()
    M, C = (int(v) for v in a.shape.split(","))
    compilers = dict(c.split("=", 1) for c in a.compilers) or {"mhc": os.environ["MHC_COMPILER"]}
    out = tempfile.mkdtemp()
    bundles = {name: bundle(c, f"{out}/{name}", spec(C, a.n, a.layout)) for name, c in compilers.items()}
    t = inputs(M, C, a.n)
    first = None
    for name, b in bundles.items():
        got = b.run(M, t)
        if first is None:
            first = got
            continue
        differ = [k for k in first if not torch.equal(bits(first[k]), bits(got[k]))]
        print(f"{name}: outputs bitwise equal to {next(iter(bundles))}'s: {not differ} {differ}")
        del got
    times = {name: {} for name in bundles}
    for _ in range(3):
        for name, b in bundles.items():
            for kernel, us in device_times(lambda: b.run(M, t), 5).items():
                if kernel.startswith("mhc_"):  # not the output buffers' NaN fills
                    times[name].setdefault("_".join(kernel.split("_")[6:]), []).extend(us)
    # expand_partial moves x, f in and x_next out: 2n + 1 units of 2*M*C bytes.
    floor = 9 * 2 * M * C / (a.tbs * 1e12) * 1e6
    print(f"{torch.cuda.get_device_name()} n={a.n} {a.layout} M={M} C={C}: median us per kernel (15 calls); "
          f"expand_partial floor {floor:.0f} us at {a.tbs} TB/s")
    for name in bundles:
        med = {k: statistics.median(u) for k, u in times[name].items()}
        print(f"  {name:5s} " + "  ".join(f"{k} {u:7.1f}" for k, u in sorted(med.items())) +
              f"  total {sum(med.values()):7.1f}" + (f"  expand_partial at {floor / med['expand_partial']:.1%} of copy BW"
                                                    if "expand_partial" in med else ""))


if __name__ == "__main__":
    main()
