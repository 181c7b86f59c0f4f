"""The layer seam's kernels against its parts' on the GPU, bitwise.

post_pre.fwd must give exactly the bits of expand_combine.fwd followed by
pre.fwd on its result, and post_pre.bwd those of aggregate.bwd (acc),
sinkhorn.bwd, scale.bwd, project.bwd (acc) and expand_combine.bwd in turn
(docs/design/seam.md): the composed forward runs the
parts' own kernels, and the fused forward ((C, n), n = 4, bf16, sm_90a)
computes x_next in the projection's partial launch with the same
instructions and the same K chunking; the fused backward (the same specs)
forms aggregate's gx inside the projection backward with aggregate's
instructions and runs aggregate's gpre sums alone, so it too gives the
parts' bits. Every output is compared bitwise
(x_next, h, ms, pre, post_next, logits, P_next, y), after NaN poisoning
(Bundle.run), for odd M, M = 1 and M > 65535; each seam runs twice
(determinism).

  python3 test/gpu/seam_gpu.py --compiler $MHC_COMPILER [--tokens 1,7,129,4097,70001]
"""

import argparse
import math
import os
import subprocess
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "Codegen"))
from kernels import DT, Bundle  # noqa: E402
from spec_matrix import post_pre  # noqa: E402
from specs import spec  # noqa: E402


def cases():
    # The fused forward (the flagship), then compositions across n, layouts,
    # dtypes and archs the device runs (sm_90a kernels need an sm_90 part).
    yield dict(n=4, act="bf16", layout="cn", C=2048, bias=True)
    yield dict(n=4, act="bf16", layout="cn", C=7168, tf32=True, weight=True)
    # The benchmark's conventions (tf32, no weight: the paced projection
    # backward), and C off the kernels' column blocks (precise, weight).
    yield dict(n=4, act="bf16", layout="cn", C=4096, tf32=True)
    yield dict(n=4, act="bf16", layout="cn", C=1002, weight=True, bias=True)
    # The fused forward with its last chunk masked at K (K % 128 = 32).
    yield dict(n=4, act="bf16", layout="cn", C=4104, tf32=True, bias=True)
    yield dict(n=4, act="bf16", layout="nc", C=2048, bias=True)
    yield dict(n=3, act="f32", layout="cn", C=1000, mode="softmax_eps")
    yield dict(n=8, act="bf16", layout="cn", C=1024, weight=True)
    yield dict(n=1, act="f16", param="bf16", layout="nc", C=64, bias=True)


def compile_bundle(compiler, out, s):
    r = subprocess.run([compiler, "--spec", s, "-o", out], capture_output=True, text=True, check=True)
    return Bundle(r.stdout.strip() + ".json")


def inputs(kw, m, gen):
    n, C = kw["n"], kw["C"]
    K, N = n * C, 2 * n + n * n
    act, param = DT[kw["act"]], DT[kw.get("param", "f32")]

    def rnd(*shape, dtype=torch.float32, scale=1.0):
        return (torch.randn(*shape, generator=gen, device="cuda") * scale).to(dtype)

    xshape = (m, n, C) if kw["layout"] == "nc" else (m, C, n)
    t = {"f": rnd(m, C, dtype=act), "post": 2 * torch.sigmoid(rnd(m, n)), "x": rnd(*xshape, dtype=act),
         "P": torch.softmax(rnd(m, n, n), dim=-1), "phi": rnd(N, K, dtype=param, scale=1.0 / math.sqrt(K)),
         "alpha": rnd(3, dtype=param), "beta": rnd(N, dtype=param, scale=0.5)}
    if kw.get("bias"):
        t["bias"] = rnd(C, dtype=param, scale=0.5)
    if kw.get("weight"):
        t["weight"] = (1.0 + rnd(K, scale=0.1)).to(param)
    return t


def bits(t):
    return t.view(torch.int32) if t.dtype == torch.float32 else t.view(torch.int16)


def check(compiler, out, arch, kw, tokens, seed):
    seam_kw = {k: v for k, v in kw.items() if k != "n"}
    seam = compile_bundle(compiler, out, post_pre("fwd", kw["n"], arch, **seam_kw))
    post_kw = {k: v for k, v in kw.items() if k in ("act", "param", "layout", "C", "bias")}
    post = compile_bundle(compiler, out, spec("expand_combine", "fwd", kw["n"], arch, **post_kw))
    pre_kw = {k: v for k, v in kw.items() if k not in ("n", "bias")}
    pre = compile_bundle(compiler, out, spec("pre", "fwd", kw["n"], arch, **pre_kw))
    fused = any(l["entry"].endswith("_expand_partial") for l in seam.manifest["launches"])
    failures = []
    for m in tokens:
        gen = torch.Generator(device="cuda").manual_seed(seed + m)
        t = inputs(kw, m, gen)
        got, again = seam.run(m, t), seam.run(m, t)
        x_next = post.run(m, t)["out"]
        want = pre.run(m, dict(t, x=x_next))
        want = {"x_next": x_next, "h": want["h"], "ms": want["ms"], "pre": want["pre"],
                "post_next": want["post"], "logits": want["logits"], "P_next": want["P"], "y": want["y"]}
        for name, w in want.items():
            g = got[name].reshape(-1)[: w.numel()]
            if not torch.equal(bits(g), bits(w.reshape(-1))):
                failures.append(f"{seam.manifest['spec']} M={m}: {name} differs from the parts'")
            if not torch.equal(bits(got[name]), bits(again[name])):
                failures.append(f"{seam.manifest['spec']} M={m}: {name} not deterministic")
    return failures, fused


def backward_inputs(kw, m, gen):
    n, C = kw["n"], kw["C"]
    N = 2 * n + n * n
    act = DT[kw["act"]]
    t = inputs(kw, m, gen)

    def rnd(*shape, dtype=torch.float32, scale=1.0):
        return (torch.randn(*shape, generator=gen, device="cuda") * scale).to(dtype)

    xshape = t["x"].shape
    t.update({"gx_next": rnd(*xshape, dtype=act), "gy": rnd(m, C, dtype=act), "gpost_next": rnd(m, n),
              "gP_next": rnd(m, n, n), "x_next": rnd(*xshape, dtype=act), "h": rnd(m, N),
              "ms": rnd(m).abs() + 0.5, "pre": torch.sigmoid(rnd(m, n)), "logits": rnd(m, n, n, scale=2.0)})
    return t


def check_backward(compiler, out, arch, kw, tokens, seed):
    """post_pre.bwd against aggregate (acc = gx_next), sinkhorn, scale,
    project (acc = aggregate's gx) and expand_combine backward, run in turn."""
    n = kw["n"]
    seam = compile_bundle(compiler, out, post_pre("bwd", n, arch, **{k: v for k, v in kw.items() if k != "n"}))
    pick = lambda *keys: {k: v for k, v in kw.items() if k in keys}  # noqa: E731
    agg = compile_bundle(compiler, out, spec("aggregate", "bwd", n, arch, acc=True, **pick("act", "layout", "C")))
    sk = compile_bundle(compiler, out, spec("sinkhorn", "bwd", n, arch, **pick("mode", "iters", "eps")))
    sc = compile_bundle(compiler, out, spec("scale", "bwd", n, arch, **pick("param")))
    pj = compile_bundle(compiler, out, spec("project", "bwd", n, arch, acc=True,
                                            **pick("act", "param", "layout", "C", "tf32", "weight")))
    ec = compile_bundle(compiler, out, spec("expand_combine", "bwd", n, arch,
                                            **pick("act", "param", "layout", "C", "bias")))
    failures = []
    for m in tokens:
        gen = torch.Generator(device="cuda").manual_seed(seed + m)
        t = backward_inputs(kw, m, gen)
        got, again = seam.run(m, t), seam.run(m, t)
        a = agg.run(m, dict(t, x=t["x_next"], acc=t["gx_next"]))
        g = sk.run(m, dict(t, gP=t["gP_next"]))
        s = sc.run(m, dict(t, gpre=a["gpre"], gpost=t["gpost_next"], glogits=g["glogits"]))
        p = pj.run(m, dict(t, gh=s["gh"], gms=s["gms"], x=t["x_next"], acc=a["gx"]))
        e = ec.run(m, dict(t, gout=p["gx"]))
        want = {"gx": e["gx"], "gf": e["gf"], "gpost": e["gpost"], "gP": e["gP"], "gphi": p["gphi"],
                "galpha": s["galpha"], "gbeta": s["gbeta"]}
        if kw.get("bias"):
            want["gbias"] = e["gbias"]
        if kw.get("weight"):
            want["gweight"] = p["gweight"]
        for name, w in want.items():
            gv = got[name].reshape(-1)[: w.numel()]
            if not torch.equal(bits(gv), bits(w.reshape(-1))):
                failures.append(f"{seam.manifest['spec']} M={m}: {name} differs from the parts'")
            if not torch.equal(bits(got[name]), bits(again[name])):
                failures.append(f"{seam.manifest['spec']} M={m}: {name} not deterministic")
    return failures


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--compiler", default=os.environ.get("MHC_COMPILER", "mhc-compile"))
    ap.add_argument("--tokens", default="1,7,129,4097,70001")
    ap.add_argument("--seed", type=int, default=int.from_bytes(os.urandom(4), "little"))
    a = ap.parse_args()
    major, _ = torch.cuda.get_device_capability()
    arch = {8: "sm_80", 9: "sm_90a", 10: "sm_100a"}[major]
    tokens = [int(v) for v in a.tokens.split(",")]
    print(f"device: {torch.cuda.get_device_name()} ({arch})  seed: {a.seed}")
    failures, fused = [], 0
    with tempfile.TemporaryDirectory() as out:
        for i, kw in enumerate(cases()):
            f, was_fused = check(a.compiler, out, arch, kw, tokens, a.seed + 7919 * i)
            failures += f
            fused += was_fused
            failures += check_backward(a.compiler, out, arch, kw, tokens, a.seed + 7919 * i + 1)
    for f in failures:
        print("FAIL", f)
    print(f"seam: {len(list(cases()))} specs, forward ({fused} fused) and backward, x M in {tokens}, "
          f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
