"""Canonical kernel specs for the GPU checks (KernelSpec::canonical's rules).

  python3 test/gpu/specs.py smoke|full [--arch sm_90a]
"""

import argparse
import itertools
import struct


def f(v):
    """A float as KernelSpec prints it: rounded to float32, 9 digits."""
    return "%.9g" % struct.unpack("f", struct.pack("f", v))[0]


def spec(op, d, n, arch, act="bf16", param="f32", layout="nc", C=2048, tf32=False,
         weight=False, bias=False, norm_eps=1e-6, pre_eps=1e-6, post_mult=2.0,
         mode="log", iters=20, eps=1e-6, acc=False):
    # "pre" (the fused pre step) carries the fields of project, scale and sinkhorn.
    s = [f"{op}.{d}", f"n={n}"]
    if op in ("project", "aggregate", "expand_combine", "pre"):
        s.append(f"act={act}")
    if op in ("project", "scale", "pre") or (op == "expand_combine" and bias):
        s.append(f"param={param}")
    if op in ("project", "aggregate", "expand_combine", "pre"):
        s += [f"layout={layout}", f"C={C}"]
    if op in ("project", "pre"):
        s += [f"tf32={int(tf32)}", f"weight={int(weight)}"]
    if op in ("scale", "pre"):
        s += [f"norm_eps={f(norm_eps)}", f"pre_eps={f(pre_eps)}", f"post_mult={f(post_mult)}"]
    if op in ("sinkhorn", "pre"):
        s += [f"mode={mode}", f"iters={iters}"]
        if mode == "softmax_eps":
            s.append(f"eps={f(eps)}")
    if op == "expand_combine":
        s.append(f"bias={int(bias)}")
    if acc:  # (the backward of aggregate, project and expand_combine; "f32": TE's f32 buffer)
        s.append("acc=f32" if acc == "f32" else "acc=1")
    s.append(f"arch={arch}")
    return ";".join(s)


def smoke(arch):
    out = []
    for d in ("fwd", "bwd"):
        for n, act, layout, C in [(4, "bf16", "nc", 2048), (4, "bf16", "cn", 1000),
                                  (3, "f32", "nc", 64), (8, "f16", "cn", 4096)]:
            out.append(spec("aggregate", d, n, arch, act=act, layout=layout, C=C))
            out.append(spec("expand_combine", d, n, arch, act=act, layout=layout, C=C))
            out.append(spec("project", d, n, arch, act=act, layout=layout, C=C))
        out.append(spec("expand_combine", d, 4, arch, bias=True, C=2048))
        out.append(spec("project", d, 4, arch, weight=True, C=2048))
        out.append(spec("project", d, 4, arch, tf32=True, C=7168))
        out.append(spec("project", d, 2, arch, act="f32", C=4096))
        for n in (2, 4, 8):
            out.append(spec("scale", d, n, arch))
            out.append(spec("sinkhorn", d, n, arch, mode="log"))
            out.append(spec("sinkhorn", d, n, arch, mode="softmax_eps"))
        out.append(spec("project", d, 6, arch, act="f32", layout="cn", C=1000, weight=True))
        out.append(spec("project", d, 8, arch, act="bf16", C=7168, weight=True))
        out.append(spec("expand_combine", d, 6, arch, act="f32", layout="cn", C=1000, bias=True))
        out.append(spec("scale", d, 4, arch, param="bf16", norm_eps=1.1920929e-07, pre_eps=0.0))
        out.append(spec("sinkhorn", d, 4, arch, mode="softmax_eps", iters=10))
    # gx plus acc (x's gradient from its other users) in the backward kernels:
    # the token ring, the per-token blocks, and the projection's mma.sync
    # kernel (which the n = 8 one-wave spec takes with acc).
    out.append(spec("aggregate", "bwd", 4, arch, layout="cn", C=2048, acc=True))
    out.append(spec("aggregate", "bwd", 3, arch, act="f32", C=1000, acc=True))
    out.append(spec("expand_combine", "bwd", 8, arch, layout="cn", C=4096, bias=True, acc=True))
    out.append(spec("expand_combine", "bwd", 6, arch, act="f32", C=1000, acc=True))
    out.append(spec("project", "bwd", 4, arch, tf32=True, C=7168, acc=True))
    out.append(spec("project", "bwd", 8, arch, tf32=True, C=2048, acc=True))
    out.append(spec("project", "bwd", 2, arch, act="f32", layout="cn", C=1000, weight=True, acc=True))
    return out


def large_m(arch):
    """Small C so that M > 65535 tokens fit the float64 reference."""
    out = []
    for d in ("fwd", "bwd"):
        for op in ("aggregate", "expand_combine", "project"):
            out.append(spec(op, d, 4, arch, C=64))
        out.append(spec("expand_combine", d, 4, arch, C=64, bias=True, layout="cn"))
        out.append(spec("project", d, 4, arch, C=64, weight=True, act="f32"))
        out.append(spec("scale", d, 4, arch))
        out.append(spec("sinkhorn", d, 4, arch, mode="log"))
        out.append(spec("sinkhorn", d, 4, arch, mode="softmax_eps"))
    return out


def n1(arch):
    """n = 1: a single stream (the degenerate mixer) for every op."""
    out = []
    for d in ("fwd", "bwd"):
        for op in ("aggregate", "expand_combine", "project"):
            out.append(spec(op, d, 1, arch, C=64))
        out.append(spec("scale", d, 1, arch))
        out.append(spec("sinkhorn", d, 1, arch))
        out.append(spec("sinkhorn", d, 1, arch, mode="softmax_eps"))
    return out


def full(arch):
    out = []
    ns = (2, 3, 4, 6, 8)
    for d, n, act, layout, C in itertools.product(("fwd", "bwd"), ns, ("bf16", "f16", "f32"),
                                                  ("nc", "cn"), (64, 1000, 4096, 7168)):
        out.append(spec("aggregate", d, n, arch, act=act, layout=layout, C=C))
        out.append(spec("expand_combine", d, n, arch, act=act, layout=layout, C=C))
        out.append(spec("project", d, n, arch, act=act, layout=layout, C=C))
    for d, n in itertools.product(("fwd", "bwd"), ns):
        out.append(spec("scale", d, n, arch))
        for mode in ("log", "softmax_eps"):
            out.append(spec("sinkhorn", d, n, arch, mode=mode))
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("which", choices=["smoke", "large_m", "n1", "full"])
    ap.add_argument("--arch", default="sm_90a")
    a = ap.parse_args()
    for s in dict.fromkeys({"smoke": smoke, "large_m": large_m, "n1": n1, "full": full}[a.which](a.arch)):
        print(s)
