"""Compiles a matrix of kernel specs to cubin with ptxas and checks them.

For every (op, direction) x n x activation dtype x layout x arch, plus the
variants (weight, bias, tf32, both Sinkhorn modes, acc), the fused pre step
and the layer seam, mhc-compile must produce
PTX, a cubin and a manifest whose launch parameter lists match the PTX entry
points exactly. The main n = 4 bf16 sm_90a kernels must not spill or use a
local-memory stack, and the pre tail must have shared memory for the partials
of the largest split its manifest's rule gives.

  python3 spec_matrix.py --compiler build/bin/mhc-compile --out DIR
"""

import argparse
import concurrent.futures as cf
import itertools
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "gpu"))
from specs import spec  # noqa: E402

ARCHS = ("sm_80", "sm_90a", "sm_100a")


def matrix():
    out = []
    for arch, d in itertools.product(ARCHS, ("fwd", "bwd")):
        for n, act, layout in itertools.product((2, 3, 4, 6, 8), ("bf16", "f16", "f32"), ("nc", "cn")):
            C = 1000 if (n + len(act)) % 2 else 2048
            for op in ("aggregate", "expand_combine", "project"):
                out.append(spec(op, d, n, arch, act=act, layout=layout, C=C))
        for n in (2, 3, 4, 6, 8):
            out.append(spec("scale", d, n, arch))
            out.append(spec("sinkhorn", d, n, arch, mode="log"))
            out.append(spec("sinkhorn", d, n, arch, mode="softmax_eps"))
        out.append(spec("project", d, 4, arch, weight=True, C=7168))
        out.append(spec("project", d, 4, arch, tf32=True, C=7168))
        out.append(spec("project", d, 4, arch, param="bf16", weight=True, C=4096))
        out.append(spec("expand_combine", d, 4, arch, bias=True, C=7168))
        out.append(spec("scale", d, 4, arch, param="bf16", norm_eps=1.1920929e-07, pre_eps=0.0))
    # x's gradient accumulated in the backward kernels (acc=1): n 1..8 spread
    # over both layouts and bf16 / f32, the token rings (n = 4, 8, bf16, (C, n)
    # on sm_90+) and the projection specs the one-wave and wgmma kernels
    # serve without acc.
    for arch, n in itertools.product(ARCHS, range(1, 9)):
        for i, act in enumerate(("bf16", "f32")):
            layout, C = ("nc", "cn")[(n + i) % 2], (1000, 2048, 96, 7168)[(n + i) % 4]
            for op in ("aggregate", "expand_combine", "project"):
                out.append(spec(op, "bwd", n, arch, act=act, layout=layout, C=C, acc=True))
    for arch in ARCHS:
        out.append(spec("expand_combine", "bwd", 4, arch, act="f16", layout="cn", C=7168, bias=True, acc=True))
        out.append(spec("project", "bwd", 4, arch, weight=True, C=7168, acc=True))
        for n, C in ((8, 2048), (8, 7168), (6, 4096), (8, 9216)):
            out.append(spec("project", "bwd", n, arch, tf32=True, C=C, acc=True))
    # TE's f32 gradient buffer (acc=f32, 2-byte activations): the three ops,
    # both layouts, bf16 / f16, the projection's mma.sync (C = 96) and
    # one-wave / wgmma (C = 7168, tf32) kernels.
    for arch, (act, layout) in itertools.product(ARCHS, (("bf16", "cn"), ("f16", "nc"))):
        out.append(spec("aggregate", "bwd", 4, arch, act=act, layout=layout, C=7168, acc="f32"))
        out.append(spec("expand_combine", "bwd", 4, arch, act=act, layout=layout, C=7168, acc="f32"))
        for C in (96, 7168):
            out.append(spec("project", "bwd", 4, arch, act=act, layout=layout, C=C, tf32=True, acc="f32"))
    # The fused pre step (forward only).
    for arch, (n, act, layout) in itertools.product(ARCHS, itertools.product((2, 3, 4, 6, 8), ("bf16", "f32"),
                                                                             ("nc", "cn"))):
        C = 1000 if (n + len(act)) % 2 else 2048
        out.append(spec("pre", "fwd", n, arch, act=act, layout=layout, C=C, mode=("log", "softmax_eps")[n % 2]))
    for arch in ARCHS:
        out.append(spec("pre", "fwd", 4, arch, act="bf16", layout="cn", C=7168, tf32=True, norm_eps=1.1920929e-07,
                        pre_eps=0.0))
        out.append(spec("pre", "fwd", 4, arch, act="f16", param="bf16", C=4096, weight=True, mode="softmax_eps"))
    # The layer seam's forward (expand_combine then pre): every n, both
    # layouts, 2- and 4-byte activations.
    for arch, n, act, layout in itertools.product(ARCHS, range(1, 9), ("bf16", "f32"), ("nc", "cn")):
        C = 1000 if (n + len(act)) % 2 else 2048
        out.append(post_pre("fwd", n, arch, act=act, layout=layout, C=C, bias=n % 2 == 0,
                            mode=("log", "softmax_eps")[n % 2]))
    for arch in ARCHS:
        out.append(post_pre("fwd", 4, arch, act="bf16", layout="cn", C=7168, tf32=True, bias=True))
        out.append(post_pre("fwd", 4, arch, act="f16", param="bf16", C=4096, weight=True, bias=True))
    # Its backward (the five backward ops, two with acc): n 1..8 spread over
    # both layouts and bf16 / f32, and the flagship's variants.
    for arch, n in itertools.product(ARCHS, range(1, 9)):
        act, layout = ("bf16", "f32")[n % 2], ("nc", "cn")[(n // 2) % 2]
        C = 1000 if (n + len(act)) % 2 else 2048
        out.append(post_pre("bwd", n, arch, act=act, layout=layout, C=C, bias=n % 3 == 0,
                            weight=n % 4 == 1, mode=("log", "softmax_eps")[n % 2]))
    for arch in ARCHS:
        out.append(post_pre("bwd", 4, arch, act="bf16", layout="cn", C=7168, tf32=True, bias=True))
        out.append(post_pre("bwd", 8, arch, act="bf16", layout="nc", C=2048, tf32=True))
    return list(dict.fromkeys(out))


def post_pre(d, n, arch, bias=False, **kw):
    """The seam's spec: the fused pre step's fields, then bias."""
    head, tail = spec("pre", d, n, arch, **kw).rsplit(";arch=", 1)
    return f"post_{head};bias={int(bias)};arch={tail}"


def main_kernel(s):
    return ";n=4;" in s and ("act=bf16" in s or s.startswith(("scale", "sinkhorn"))) \
        and "arch=sm_90a" in s and "param=bf16" not in s


def entry_params(ptx):
    """entry name -> list of PTX parameter types."""
    out = {}
    for m in re.finditer(r"\.entry\s+(\w+)\(([^)]*)\)", ptx):
        params = [p.strip() for p in m.group(2).split(",") if p.strip()]
        out[m.group(1)] = [" ".join(p.split()[1:-1]) for p in params]
    return out


def check(compiler, out_dir, s):
    r = subprocess.run([compiler, "--spec", s, "-o", out_dir], capture_output=True, text=True)
    if r.returncode != 0:
        return [f"{s}: mhc-compile failed: {r.stderr.strip()[-400:]}"]
    base = r.stdout.strip()
    errors = []
    for ext in (".ptx", ".cubin", ".json"):
        if not os.path.exists(base + ext):
            errors.append(f"{s}: missing {ext}")
    if errors:
        return errors
    manifest = json.load(open(base + ".json"))
    if manifest["spec"] != s:
        errors.append(f"{s}: manifest spec is {manifest['spec']}")
    entries = entry_params(open(base + ".ptx").read())
    if set(entries) != {l["entry"] for l in manifest["launches"]}:
        errors.append(f"{s}: PTX entries {sorted(entries)} != manifest launches")
    names = {b["name"] for b in manifest["buffers"]}
    for l in manifest["launches"]:
        # The ABI: each buffer is (ptr, ptr, offset, size, stride), M and S one u64 each,
        # a tensor map of a buffer ("tmap16:x") a 128-byte CUtensorMap by value.
        want = []
        for p in l["params"]:
            if p in ("M", "S"):
                want.append(".u64")
            elif p.startswith("tmap") and p.split(":", 1)[-1] in names:
                want.append(".align 64 .b8")
            elif p in names:
                want += [".u64 .ptr .align 1"] * 2 + [".u64"] * 3
            else:
                errors.append(f"{s}: launch {l['entry']} names unknown buffer {p}")
        got = entries.get(l["entry"])
        if got is not None and got != want:
            errors.append(f"{s}: {l['entry']} PTX params {got} != manifest {want}")
        if len(want) != l["ptx_params"]:
            errors.append(f"{s}: {l['entry']} ptx_params {l['ptx_params']} != {len(want)}")
        res = l["resources"]
        if res["registers"] < 0:
            errors.append(f"{s}: no ptxas report for {l['entry']}")
        if main_kernel(s) and (res["spill_stores"] or res["spill_loads"] or res["stack_bytes"]):
            errors.append(f"{s}: {l['entry']} spills ({res})")
        if l["entry"].endswith("tail"):
            errors += tail_fits_splits(s, manifest["split"], l)
    return errors


def tail_fits_splits(s, split, launch):
    """The pre tail stages a token's partials of every split in shared memory: its launch must have room for
    N + 1 f32 columns of the largest S the split rule gives, beside its row (N + 1) and mix (N) buffers."""
    n = int(re.search(r";n=(\d+);", s).group(1))
    N, largest = 2 * n + n * n, max(split["max"], split.get("single_block", 0))
    need = 4 * ((N + 1) * largest + 2 * N + 1)
    have = launch["resources"]["shared_bytes"] + launch.get("dynamic_shared_bytes", 0)
    return [] if have >= need else [f"{s}: {launch['entry']} has {have} shared bytes, the partials of S = {largest} need {need}"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--compiler", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    specs = matrix()
    errors = []
    with cf.ThreadPoolExecutor(a.jobs) as pool:
        for errs in pool.map(lambda s: check(a.compiler, a.out, s), specs):
            errors += errs
    for e in errors:
        print("ERROR", e)
    mains = sum(main_kernel(s) for s in specs)
    print(f"spec matrix: {len(specs)} specs ({mains} main n=4 sm_90a), {len(errors)} errors")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
