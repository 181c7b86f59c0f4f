"""Runs compiled mhc kernel bundles on the GPU and checks them against a
float64 evaluation of MATH.md (python/mhc/reference.py) on fresh random
inputs, with MATH.md's bounds.

  python3 test/gpu/kernels.py BUNDLE_DIR [--tokens 1,7,4096] [--out results.json]

Each bundle (<kernel>.json + .cubin, as written by mhc-compile) is launched
through CuPy exactly as its manifest says: buffers as 1-D memref descriptors,
grid from the token count, split count S from the manifest's rule. Outputs
are poisoned with NaN first, so an element nobody writes fails. Every kernel
also runs twice on the same inputs: the results must be bitwise equal.
"""

import argparse
import glob
import json
import math
import os
import sys

import numpy as np
import torch
import cupy

def _load_reference():
    """python/mhc/reference.py by path: it needs only torch, and this harness
    must not import the mhc package (which may be installed, or not)."""
    import importlib.util
    path = os.path.join(os.path.dirname(__file__), "..", "..", "python", "mhc", "reference.py")
    spec = importlib.util.spec_from_file_location("mhc_reference", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ref = _load_reference()

DT = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}


def parse_spec(text):
    head, *fields = text.split(";")
    op, direction = head.rsplit(".", 1)
    spec = {"op": op, "dir": direction}
    for f in fields:
        k, v = f.split("=", 1)
        spec[k] = v
    spec["n"] = int(spec["n"])
    for k in ("C", "iters"):
        if k in spec:
            spec[k] = int(spec[k])
    for k in ("norm_eps", "pre_eps", "post_mult", "eps"):
        if k in spec:
            spec[k] = float(spec[k])
    for k in ("tf32", "weight", "bias", "acc"):
        if k in spec:
            spec[k] = spec[k] == "1"
    return spec


class Bundle:
    def __init__(self, json_path):
        self.manifest = json.load(open(json_path))
        self.spec = parse_spec(self.manifest["spec"])
        cubin = json_path[:-5] + ".cubin"
        self.module = cupy.RawModule(path=cubin)
        self.functions = {l["entry"]: self.module.get_function(l["entry"])
                          for l in self.manifest["launches"]}
        # Dynamic shared memory past 48 KB is opt-in per function, as in the
        # runtime.
        for l in self.manifest["launches"]:
            if l.get("dynamic_shared_bytes", 0) > 48 * 1024:
                self.functions[l["entry"]].max_dynamic_shared_size_bytes = l["dynamic_shared_bytes"]

    def split_for(self, m):
        r = self.manifest["split"]
        blocks = -(-m // r["tokens_per_block"])
        if blocks == 1 and r.get("single_block", 0) > 0:
            return r["single_block"]
        if blocks <= 0 or r["max"] <= 1:
            return 1
        slots = r.get("wave_slots", 0)
        if slots > 0:  # the smallest S filling >= 90% of its waves, else the fullest
            fill = [(blocks * s, -(-blocks * s // slots) * slots, s) for s in range(1, r["max"] + 1)]
            for used, room, s in fill:
                if 10 * used >= 9 * room:
                    return s
            return min(fill, key=lambda f: (-f[0] / f[1], f[2]))[2]
        return max(1, min(r["max"], -(-r["target_blocks"] // blocks)))

    def run(self, m, tensors):
        """tensors: name -> input tensor. Returns name -> output tensor."""
        s = self.split_for(m)
        bufs = {}
        for b in self.manifest["buffers"]:
            e = b["elems"]
            numel = e["per_token"] * m + e["fixed"] + e["per_token_split"] * m * s
            if b["role"] == "input":
                t = tensors[b["name"]].contiguous()
                assert t.numel() == numel, (b["name"], t.numel(), numel)
                assert t.dtype == DT[b["dtype"]], (b["name"], t.dtype)
            else:
                t = torch.full((max(numel, 1),), float("nan"), dtype=DT[b["dtype"]], device="cuda")
                numel = max(numel, 1)
            assert t.data_ptr() % 16 == 0
            bufs[b["name"]] = (t, numel)
        for launch in self.manifest["launches"]:
            args = []
            for p in launch["params"]:
                if p == "M":
                    args.append(np.int64(m))
                elif p == "S":
                    args.append(np.int64(s))
                else:
                    t, numel = bufs[p]
                    ptr = np.uint64(t.data_ptr())
                    args += [ptr, ptr, np.int64(0), np.int64(numel), np.int64(1)]
            g = launch["grid"]
            if g["items_per_token"] > 0:
                blocks = -(-m * g["items_per_token"] // g["items_per_block"])
            else:
                blocks = -(-m // g["tokens_per_block"]) if g["tokens_per_block"] > 0 else g["fixed_blocks"]
            if g["times_split"]:
                blocks *= s
            if m < g.get("min_tokens", 0) or m > (g.get("max_tokens", 0) or m):
                blocks = 0
            if blocks == 0:
                continue
            self.functions[launch["entry"]]((blocks,), (launch["block"][0],), tuple(args),
                                            shared_mem=launch.get("dynamic_shared_bytes", 0))
        torch.cuda.synchronize()
        return {b["name"]: bufs[b["name"]][0] for b in self.manifest["buffers"] if b["role"] == "output"}


def make_inputs(spec, m, gen):
    """Fresh random inputs for one kernel, named as in its manifest."""
    n, op, d = spec["n"], spec["op"], spec["dir"]
    C = spec.get("C", 0)
    K, N = n * C, 2 * n + n * n
    act = DT.get(spec.get("act", "f32"))
    param = DT.get(spec.get("param", "f32"))
    layout = spec.get("layout", "nc")

    def rnd(*shape, dtype=torch.float32, scale=1.0):
        return (torch.randn(*shape, generator=gen, device="cuda") * scale).to(dtype)

    xshape = (m, n, C) if layout == "nc" else (m, C, n)
    t = {}
    if op == "project":
        t["x"] = rnd(*xshape, dtype=act)
        t["phi"] = rnd(N, K, dtype=param, scale=1.0 / math.sqrt(K))
        if spec["weight"]:
            t["weight"] = (1.0 + rnd(K, scale=0.1)).to(param)
        if d == "bwd":
            t["gh"] = rnd(m, N)
            t["gms"] = rnd(m)
    elif op == "scale":
        t["h"] = rnd(m, N)
        t["ms"] = rnd(m).abs() + 0.5
        t["alpha"] = rnd(3, dtype=param)
        t["beta"] = rnd(N, dtype=param, scale=0.5)
        if d == "bwd":
            t["gpre"] = rnd(m, n)
            t["gpost"] = rnd(m, n)
            t["glogits"] = rnd(m, n, n)
    elif op == "sinkhorn":
        t["logits"] = rnd(m, n, n, scale=2.0)
        if d == "bwd":
            t["gP"] = rnd(m, n, n)
    elif op == "aggregate":
        t["x"] = rnd(*xshape, dtype=act)
        t["pre"] = torch.sigmoid(rnd(m, n))
        if d == "bwd":
            t["gy"] = rnd(m, C, dtype=act)
    elif op == "expand_combine":
        t["f"] = rnd(m, C, dtype=act)
        t["post"] = 2 * torch.sigmoid(rnd(m, n))
        t["x"] = rnd(*xshape, dtype=act)
        t["P"] = torch.softmax(rnd(m, n, n), dim=-1)
        if spec.get("bias"):
            t["bias"] = rnd(C, dtype=param, scale=0.5)
        if d == "bwd":
            t["gout"] = rnd(*xshape, dtype=act)
    if spec.get("acc"):  # x's gradient from its other users
        t["acc"] = rnd(*xshape, dtype=act)
    return t


def reference(spec, t):
    """float64 outputs, named as in the manifest; with acc, gx is acc plus
    the op's own gradient of x."""
    out = _reference(spec, {k: v for k, v in t.items() if k != "acc"})
    if "acc" in t:
        out["gx"] = out["gx"] + t["acc"].double()
    return out


def _reference(spec, t):
    n, op, d = spec["n"], spec["op"], spec["dir"]
    layout = spec.get("layout", "nc")
    x64 = {k: v.double().requires_grad_(d == "bwd" and v.is_floating_point()) for k, v in t.items()}
    if op == "project":
        h, ms = ref.project(x64["x"], x64["phi"], x64.get("weight"))
        if d == "fwd":
            return {"h": h, "ms": ms}
        wrt = ["x", "phi"] + (["weight"] if "weight" in x64 else [])
        grads = torch.autograd.grad((h, ms), [x64[k] for k in wrt], (x64["gh"], x64["gms"]))
        out = dict(zip(["gx", "gphi", "gweight"], grads))
        return out
    if op == "scale":
        kw = dict(norm_eps=spec["norm_eps"], pre_eps=spec["pre_eps"], post_mult=spec["post_mult"])
        pre, post, logits = ref.scale(x64["h"], x64["ms"], x64["alpha"], x64["beta"], n, **kw)
        if d == "fwd":
            return {"pre": pre, "post": post, "logits": logits}
        wrt = ["h", "ms", "alpha", "beta"]
        grads = torch.autograd.grad((pre, post, logits), [x64[k] for k in wrt],
                                    (x64["gpre"], x64["gpost"], x64["glogits"]))
        return dict(zip(["gh", "gms", "galpha", "gbeta"], grads))
    if op == "sinkhorn":
        P = ref.sinkhorn(x64["logits"], spec["mode"], spec["iters"], spec.get("eps", 0.0))
        if d == "fwd":
            return {"P": P}
        (g,) = torch.autograd.grad(P, [x64["logits"]], x64["gP"])
        return {"glogits": g}
    if op == "aggregate":
        y = ref.aggregate(x64["x"], x64["pre"], layout)
        if d == "fwd":
            return {"y": y}
        grads = torch.autograd.grad(y, [x64["x"], x64["pre"]], x64["gy"])
        return dict(zip(["gx", "gpre"], grads))
    if op == "expand_combine":
        out = ref.expand_combine(x64["f"], x64["post"], x64["x"], x64["P"], x64.get("bias"), layout)
        if d == "fwd":
            return {"out": out}
        wrt = ["f", "post", "x", "P"] + (["bias"] if "bias" in x64 else [])
        grads = torch.autograd.grad(out, [x64[k] for k in wrt], x64["gout"])
        return dict(zip(["gf", "gpost", "gx", "gP", "gbias"], grads))
    raise ValueError(op)


def bound(spec, out_dtype, kappa=1.0):
    """MATH.md's bounds: TF32 products 2e-3, bf16/f16 outputs 1e-2, else 1e-5,
    times max(1, kappa) for Sinkhorn's backward (see cancellation())."""
    if out_dtype in (torch.bfloat16, torch.float16):
        return 1e-2
    if spec["op"] == "project" and spec.get("tf32"):
        return 2e-3
    if spec["op"] == "sinkhorn" and spec["dir"] == "bwd":
        return 1e-5 * max(1.0, kappa)
    return 1e-5


def cancellation(spec, t, want):
    """kappa = ||P * gP|| / ||glogits||: how much larger than Sinkhorn's input
    gradient the terms are whose difference it is (1 for other ops).

    glogits sums to zero along every row and column (P does not change when a
    constant is added to a row or column of L), so for small n it is the
    difference of nearly equal terms of size |P * gP|, and every fp32
    evaluation errs by ~1e-7 * |P * gP|, not 1e-7 * |glogits|. Measured with
    n = 2, M = 1 (a single 2x2 gradient) over 3000 seeds: the fp32 ATen
    reference (torch.ops.mhc.* on CPU) misses 1e-5 for 2.3% of inputs in log
    mode (worst 2.6e-3, kappa up to 5e4), while err / max(1, kappa) stays
    <= 4.5e-7; the CUDA kernel's spread matches the reference's
    (test/gpu/sinkhorn_error_spread.py). This is MATH.md's written reason
    for scaling the 1e-5 bound by kappa.
    """
    if spec["op"] != "sinkhorn" or spec["dir"] != "bwd":
        return 1.0
    L = t["logits"].double()
    P = ref.sinkhorn(L, spec["mode"], spec["iters"], spec.get("eps", 0.0))
    g = want["glogits"].detach()
    return ((P * t["gP"].double()).norm() / g.norm().clamp_min(1e-300)).item()


def check(bundle, m, seed):
    spec = bundle.spec
    gen = torch.Generator(device="cuda").manual_seed(seed)
    t = make_inputs(spec, m, gen)
    got = bundle.run(m, t)
    again = bundle.run(m, t)
    want = reference(spec, t)
    kappa = cancellation(spec, t, want)
    rows = []
    for name, g in got.items():
        r = want[name].detach().reshape(-1)
        gv = g.reshape(-1)[: r.numel()]
        g64 = gv.double()
        err = (g64 - r).norm().item() / max(r.norm().item(), 1e-300)
        maxerr = (g64 - r).abs().max().item() if r.numel() else 0.0
        scale = r.abs().max().item() if r.numel() else 0.0
        b = bound(spec, g.dtype, kappa)
        finite = bool(torch.isfinite(g64).all().item()) == bool(torch.isfinite(r).all().item())
        det = torch.equal(g.view(torch.uint8) if g.dtype != torch.float32 else g.view(torch.int32),
                          again[name].view(torch.uint8) if g.dtype != torch.float32 else again[name].view(torch.int32))
        ok = finite and err <= b and maxerr <= 16 * b * max(scale, 1e-30) and det
        rows.append(dict(spec=bundle.manifest["spec"], M=m, output=name, rel=err, max_abs=maxerr,
                         bound=b, deterministic=det, ok=ok))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bundle")
    ap.add_argument("--tokens", default="1,7,4096")
    ap.add_argument("--out", default=None)
    ap.add_argument("--seed", type=int, default=int.from_bytes(os.urandom(4), "little"))
    args = ap.parse_args()
    print(f"device: {torch.cuda.get_device_name()}  seed: {args.seed}")
    rows = []
    paths = sorted(glob.glob(os.path.join(args.bundle, "*.json")))
    for i, p in enumerate(paths):
        b = Bundle(p)
        for m in [int(v) for v in args.tokens.split(",")]:
            try:
                rows += check(b, m, args.seed + 7919 * i + m)
            except Exception as e:  # a failure to run is a failed check
                rows.append(dict(spec=b.manifest["spec"], M=m, output="(run)", rel=float("nan"),
                                 max_abs=float("nan"), bound=0, deterministic=False, ok=False, error=repr(e)))
    bad = [r for r in rows if not r["ok"]]
    for r in bad:
        print("FAIL", r)
    worst = {}
    for r in rows:
        key = r["spec"].split(";")[0]
        ratio = r["rel"] / r["bound"] if r["bound"] else float("inf")
        if key not in worst or not (ratio <= worst[key][0]):
            worst[key] = (ratio, r)
    print(f"{'op':22s} {'worst rel err':>14s} {'bound':>8s}  spec (M)")
    for key in sorted(worst):
        ratio, r = worst[key]
        print(f"{key:22s} {r['rel']:14.3e} {r['bound']:8.0e}  {r['spec']} (M={r['M']}, {r['output']})")
    if args.out:
        json.dump(rows, open(args.out, "w"), indent=1)
    print(f"kernels: {len(rows) - len(bad)} passed, {len(bad)} failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
