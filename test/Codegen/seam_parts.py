"""Checks that the layer seam's composed kernels are its parts' kernels.

For each post_pre spec, every launch <seam>_<stage>_<launch> must have the
PTX of the part's own launch <part>_<launch> (the part's spec compiled on its
own), with only the entry's name changed: the composed seam then computes the
unfused ops' bits. The fused forward's pack and tail are the pre step's; its
partial launch (expand + partials) is its own. The fused backward's
sinkhorn, scale and expand_combine stages and the projection's zero and
column-sum launches are the parts'; its token pass (aggregate without gx)
and the projection's main launch (aggregate's gx folded in) are its own.

  python3 seam_parts.py --compiler build/bin/mhc-compile --out DIR
"""

import argparse
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from spec_matrix import post_pre  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "gpu"))
from specs import spec  # noqa: E402

# (stage, the part's op, the part's launches it runs; None: all), per
# variant (docs/design/seam.md). The fused forward's partial launch computes
# x_next itself: only its pack and the tail are the pre step's.
STAGES = {
    "fwd": [("post", "expand_combine", None), ("pre", "pre", None)],
    "fused": [("expand", "pre", {"pack"}), ("pre", "pre", {"tail"})],
    "bwd": [("aggregate", "aggregate", None), ("sinkhorn", "sinkhorn", None), ("scale", "scale", None),
            ("project", "project", None), ("post", "expand_combine", None)],
    "fused_bwd": [("sinkhorn", "sinkhorn", None), ("scale", "scale", None),
                  ("project", "project", {"zero", "partials_final"}), ("post", "expand_combine", None)],
}
# Launches of a variant that no part has.
OWN = {"fwd": set(), "fused": {"expand_partial", "expand_partial_few"}, "bwd": set(),
       "fused_bwd": {"aggregate_main", "project_main"}}
# The spec fields each part takes from the seam's (specs.spec prints them);
# the backward's aggregate and project take acc.
FIELDS = {"expand_combine": ("act", "param", "layout", "C", "bias"),
          "aggregate": ("act", "layout", "C"),
          "sinkhorn": ("mode", "iters", "eps"),
          "scale": ("param", "norm_eps", "pre_eps", "post_mult"),
          "project": ("act", "param", "layout", "C", "tf32", "weight"),
          "pre": ("act", "param", "layout", "C", "tf32", "weight", "norm_eps", "pre_eps", "post_mult",
                  "mode", "iters", "eps")}


def part_spec(op, seam_kw, d, n, arch):
    kw = {k: v for k, v in seam_kw.items() if k in FIELDS[op]}
    if d == "bwd" and op in ("aggregate", "project"):
        kw["acc"] = True
    return spec(op, d, n, arch, **kw)


def compile_spec(compiler, out, s):
    r = subprocess.run([compiler, "--spec", s, "--ptx-only", "-o", out], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"ERROR {s}: {r.stderr.strip()[-400:]}")
    base = r.stdout.strip()
    return json.load(open(base + ".json")), open(base + ".ptx").read()


def entries(ptx):
    """entry name -> its text, from its '// .globl' line to the next one,
    without what the PTX merge shares between entries (the dynamic shared
    memory's declaration, which precedes its first user) and blank lines."""
    ptx = re.sub(r"^\.extern \.shared .*__dynamic_shmem__\d+\[\];\n", "", ptx, flags=re.M)
    parts = re.split(r"(?=^[ \t]*// \.globl\s)", ptx, flags=re.M)
    return {re.search(r"\.entry (\w+)\(", p).group(1): p.strip() for p in parts[1:]}


def check(compiler, out, d, n, arch, variant=None, **kw):
    variant = variant or d
    seam = post_pre(d, n, arch, **kw)
    manifest, ptx = compile_spec(compiler, out, seam)
    seam_entries = entries(ptx)
    kernel = f"mhc_post_pre_{d}_n{n}_{manifest['hash']}"
    errors, compared = [], 0
    for stage, op, launches in STAGES[variant]:
        pm, pptx = compile_spec(compiler, out, part_spec(op, kw, d, n, arch))
        part_kernel = f"mhc_{op}_{d}_n{n}_{pm['hash']}"
        for entry, text in entries(pptx).items():
            launch = entry[len(part_kernel) + 1:]
            if launches is not None and launch not in launches:
                continue
            mine = f"{kernel}_{stage}_{launch}"
            if mine not in seam_entries:
                errors.append(f"{seam}: no launch {mine} for {entry}")
                continue
            if seam_entries[mine] != text.replace(part_kernel, f"{kernel}_{stage}"):
                errors.append(f"{seam}: {mine} differs from {entry}")
            compared += 1
    own = {f"{kernel}_{o}" for o in OWN[variant]}
    if compared + len(own) != len(seam_entries) or not own <= set(seam_entries):
        errors.append(f"{seam}: launches {sorted(seam_entries)}, {compared} matched to parts")
    return errors, compared


def cases():
    for arch in ("sm_80", "sm_90a", "sm_100a"):
        yield dict(d="fwd", n=4, arch=arch, act="bf16", layout="nc", C=2048, bias=True)
        yield dict(d="fwd", n=3, arch=arch, act="f32", layout="cn", C=1000, mode="softmax_eps")
        yield dict(d="fwd", n=8, arch=arch, act="bf16", layout="cn", C=4096, tf32=True, weight=True)
        yield dict(d="fwd", n=1, arch=arch, act="f16", param="bf16", layout="nc", C=64, bias=True)
        # (On sm_90a the flagship's fused backward.)
        yield dict(d="bwd", n=4, arch=arch, act="bf16", layout="cn", C=2048, bias=True,
                   variant="fused_bwd" if arch == "sm_90a" else None)
        yield dict(d="bwd", n=3, arch=arch, act="f32", layout="nc", C=1000, weight=True, mode="softmax_eps")
        yield dict(d="bwd", n=8, arch=arch, act="bf16", layout="nc", C=2048, tf32=True)
    # The flagship's fused forward ((C, n), n = 4, bf16, f32 parameters, sm_90a).
    yield dict(d="fwd", n=4, arch="sm_90a", act="bf16", layout="cn", C=2048, bias=True, variant="fused")
    yield dict(d="fwd", n=4, arch="sm_90a", act="bf16", layout="cn", C=7168, tf32=True, weight=True,
               variant="fused")
    # The fused backward at the benchmark's shape (tf32, no weight: the paced
    # projection kernel) and with a weight (precise).
    yield dict(d="bwd", n=4, arch="sm_90a", act="bf16", layout="cn", C=7168, tf32=True, variant="fused_bwd")
    yield dict(d="bwd", n=4, arch="sm_90a", act="bf16", layout="cn", C=1000, weight=True, variant="fused_bwd")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--compiler", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    errors, total, specs = [], 0, 0
    for c in cases():
        e, k = check(a.compiler, a.out, **c)
        errors += e
        total += k
        specs += 1
    for e in errors:
        print("ERROR", e)
    print(f"seam parts: {specs} specs, {total} launches identical to their parts', {len(errors)} errors")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
