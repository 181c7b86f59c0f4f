"""The GPU suite of the layer seam (docs/design/seam.md): torch.ops.mhc.post_pre
and its gradient on CUDA against float64 SPEC.md, run to run bitwise, against
the unfused ops (mhc.post then mhc.pre), the seam's gradient bitwise against
the separate backward ops it replaces (the flagship's fused backward, and
the composition elsewhere), through mhc.HyperConnectionStack
(determinism, torch.compile, CUDA-graph capture of a training step), and the
path taken: where codegen generates the seam's kernels (post_pre.fwd / .bwd)
no call may fall back to the reference.

Run on the GPU machine by test/gpu/run-torch-suite.sh: pytest -q test/gpu/test_seam_gpu.py
"""

import json
import os
import struct
import subprocess
import sys
import textwrap
import zlib

import pytest
import torch
from torch import nn

import mhc
from mhc import reference as ref

sys.path.insert(0, os.path.dirname(__file__))
from kernels import DT  # noqa: E402

assert torch.cuda.is_available(), "the GPU suite needs a GPU"
SEED = int(os.environ.get("MHC_SEED") or int.from_bytes(os.urandom(4), "little"))
RESULTS = []  # (output, rel, bound, case) for the summary


def case_seed(*key):
    return SEED + zlib.crc32(repr(key).encode()) % 100000


def arch():
    """The codegen target of this GPU, as the runtime names it (Driver::archOf)."""
    major, minor = torch.cuda.get_device_capability()
    return {9: "sm_90a", 10: "sm_100a"}.get(major, "sm_80")


def f32_text(v):
    """A float attribute as KernelSpec::canonical prints it (%.9g of the float)."""
    return "%.9g" % struct.unpack("f", struct.pack("f", v))[0]


def seam_spec(cfg, direction):
    """The canonical post_pre spec string of a case (checked by mhc._C.canonical_spec)."""
    s = (f"post_pre.{direction};n={cfg['n']};act={cfg['act']};param={cfg.get('param', 'f32')};"
         f"layout={cfg['layout']};C={cfg['C']};tf32={int(cfg['tf32'])};weight={int(cfg['weight'])};"
         f"norm_eps={f32_text(cfg['norm_eps'])};pre_eps={f32_text(cfg['pre_eps'])};post_mult={f32_text(2.0)};"
         f"mode={cfg['mode']};iters=20")
    if cfg["mode"] == "softmax_eps":
        s += f";eps={f32_text(1e-6)}"
    s += f";bias={int(cfg['bias'])};arch={arch()}"
    assert mhc._C.canonical_spec(s) == s
    return s


def acc_specs(cfg):
    """The canonical specs of the two backward ops the separate-op seam
    gradient calls with `acc` (aggregate's and project's)."""
    common = f"n={cfg['n']};act={cfg['act']}"
    layout = f"layout={cfg['layout']};C={cfg['C']}"
    specs = [f"aggregate.bwd;{common};{layout};acc=1;arch={arch()}",
             f"project.bwd;{common};param={cfg.get('param', 'f32')};{layout};tf32={int(cfg['tf32'])};"
             f"weight={int(cfg['weight'])};acc=1;arch={arch()}"]
    for s in specs:
        assert mhc._C.canonical_spec(s) == s
    return specs


def no_reference(cfg):
    """Whether every call of a seam, forward and backward, should run a
    generated kernel: the seam's own, or the separate ops' (the ones with
    acc included)."""
    if seam_kernel(cfg, "fwd") and seam_kernel(cfg, "bwd"):
        return True
    return all(mhc._C.unsupported_reason(s) == "" for s in acc_specs(cfg))


def seam_kernel(cfg, direction):
    """Whether this case runs the seam's own kernel (codegen has it, the pre step fuses at M)."""
    return mhc._C.unsupported_reason(seam_spec(cfg, direction)) == "" and mhc._C.pre_step_fuses(cfg["n"], cfg["M"])


def inputs(cfg, gen):
    M, n, C = cfg["M"], cfg["n"], cfg["C"]
    N, K = 2 * n + n * n, n * C
    act, param = DT[cfg["act"]], DT[cfg.get("param", "f32")]

    def rnd(*shape, scale=1.0, dtype=torch.float32):
        return (torch.randn(*shape, generator=gen, device="cuda") * scale).to(dtype)

    x = rnd(*((M, n, C) if cfg["layout"] == "nc" else (M, C, n)), dtype=act)
    return dict(f=rnd(M, C, dtype=act), post=2 * torch.sigmoid(rnd(M, n)), x=x,
                P=torch.softmax(rnd(M, n, n), -2), bias=rnd(C, scale=0.5, dtype=param) if cfg["bias"] else None,
                phi=rnd(N, K, scale=K ** -0.5, dtype=param), alpha=(rnd(3).abs() + 0.5).to(param),
                beta=rnd(N, scale=0.5, dtype=param),
                weight=(1 + rnd(K, scale=0.1)).to(param) if cfg["weight"] else None)


def attrs(cfg):
    eps = 1e-6 if cfg["mode"] == "softmax_eps" else 0.0
    return (cfg["n"], cfg["layout"], cfg["tf32"], cfg["norm_eps"], cfg["pre_eps"], 2.0, cfg["mode"], 20, eps)


FWD_ARGS = ("f", "post", "x", "P", "bias", "phi", "alpha", "beta", "weight")


def _f64(v, grad=False):
    return None if v is None else v.detach().double().requires_grad_(grad)


def forward64(cfg, t, saved):
    """(result, the kernel's, float64 SPEC.md of its stage on the kernel's own
    inputs to that stage, that stage's bound), as the pre step's test does:
    x_next = expand_combine of the inputs; h, ms = project(x_next); pre,
    post_next, logits = scale(h, ms); P_next = sinkhorn(logits); y =
    aggregate(x_next, pre). Bounds: SPEC.md's for the stage's output."""
    n, layout, tf32, norm_eps, pre_eps, post_mult, mode, iters, eps = attrs(cfg)
    x_next, h, ms, pre, post_next, logits, P_next, y = saved
    d = _f64
    x64 = ref.expand_combine(d(t["f"]), d(t["post"]), d(t["x"]), d(t["P"]), d(t["bias"]), layout)
    h64, ms64 = ref.project(d(x_next), d(t["phi"]), d(t["weight"]))
    pre64, post64, L64 = ref.scale(d(h), d(ms), d(t["alpha"]), d(t["beta"]), n, norm_eps, pre_eps, post_mult)
    act = 1e-2 if cfg["act"] != "f32" else 1e-5
    return [("x_next", x_next, x64, act), ("h", h, h64, 2e-3 if tf32 else 1e-5), ("ms", ms, ms64, 1e-5),
            ("pre", pre, pre64, 1e-5), ("post_next", post_next, post64, 1e-5), ("logits", logits, L64, 1e-5),
            ("P_next", P_next, ref.sinkhorn(d(logits), mode, iters, eps), 1e-5),
            ("y", y, ref.aggregate(d(x_next), d(pre), layout), act)]


def sinkhorn_grad64(cfg, logits, gP):
    """float64 glogits, and kappa = ||P * gP|| / ||glogits|| (1 for n = 1,
    whose 1 x 1 Sinkhorn has no gradient)."""
    _, _, _, _, _, _, mode, iters, eps = attrs(cfg)
    L = _f64(logits, True)
    P = ref.sinkhorn(L, mode, iters, eps)
    (glogits,) = torch.autograd.grad(P, L, gP.double())
    kappa = ((P * gP).norm() / glogits.norm().clamp_min(1e-300)).item() if cfg["n"] > 1 else 1.0
    return glogits, kappa


def backward64(cfg, t, saved, gouts):
    """float64 SPEC.md of the seam's gradient on the op's own inputs: the
    contract's chain (docs/design/seam.md), each step autograd of
    reference.py, nothing rounded in between. Also each gradient's bound
    (`bound`): kappa = ||P * gP|| / ||glogits|| of its Sinkhorn step
    (test/gpu/kernels.py: cancellation()) for all of them, and for gpost
    and gP the condition of their sums over C (`dot_condition`)."""
    n, layout, tf32, norm_eps, pre_eps, post_mult, mode, iters, eps = attrs(cfg)
    x_next, h, ms, pre, _, logits, _, _ = saved
    gx_next, gy, gpost_next, gP_next = (g.double() for g in gouts)
    X, PRE = _f64(x_next, True), _f64(pre, True)
    g_agg, gpre = torch.autograd.grad(ref.aggregate(X, PRE, layout), (X, PRE), gy)
    glogits, kappa = sinkhorn_grad64(cfg, logits, gP_next)
    H, MS, A, B = (_f64(v, True) for v in (h, ms, t["alpha"], t["beta"]))
    gh, gms, galpha, gbeta = torch.autograd.grad(ref.scale(H, MS, A, B, n, norm_eps, pre_eps, post_mult),
                                                 (H, MS, A, B), (gpre, gpost_next, glogits))
    X, PHI, W = _f64(x_next, True), _f64(t["phi"], True), _f64(t["weight"], t["weight"] is not None)
    g_proj, gphi, *gw = torch.autograd.grad(ref.project(X, PHI, W), [X, PHI] + ([W] if W is not None else []),
                                            (gh, gms))
    g = gx_next + g_agg + g_proj
    F, POST, X0, P0, BIAS = (_f64(t[k], t[k] is not None) for k in ("f", "post", "x", "P", "bias"))
    gf, gpost, gx, gP, *gb = torch.autograd.grad(ref.expand_combine(F, POST, X0, P0, BIAS, layout),
                                                 [F, POST, X0, P0] + ([BIAS] if BIAS is not None else []), g)
    want = dict(gx=gx, gf=gf, gpost=gpost, gP=gP, gphi=gphi, galpha=galpha, gbeta=gbeta)
    want.update({"gbias": b for b in gb})
    want.update({"gweight": w for w in gw})
    fb = F if BIAS is None else F + BIAS
    nc = (lambda v: v.transpose(1, 2)) if layout == "cn" else (lambda v: v)
    dots = dict(gpost=dot_condition(fb.unsqueeze(1), nc(g)), gP=dot_condition(nc(X0), nc(g)))
    return want, {name: bound(cfg, kappa, dots.get(name, 1.0)) for name in want}


def dot_condition(a, g):
    """||terms|| / ||sums|| of the sums over C in expand_combine's gradient,
    sum_c a[m, i, c] g[m, j, c] (a, g: [M, rows, C]; gpost: a = f + bias,
    one row; gP: a = x), normwise over (m, i, j). An fp32 sum of C terms
    errs by ~1e-7 of the terms' norm, so where the sum is much smaller than
    its terms (n = 1, M = 1: a single dot product of C terms) every fp32
    evaluation can miss 1e-5; docs/GPU-CHECKS.md has the measurement."""
    a, g = (v.detach().double() for v in (a, g))
    terms = torch.einsum("mic,mjc->mij", a * a, g * g).sum().sqrt()
    return (terms / torch.einsum("mic,mjc->mij", a, g).norm().clamp_min(1e-300)).item()


def bound(cfg, kappa=1.0, dot=1.0):
    """SPEC.md's bounds for the gradient: 2-byte activations 1e-2 (an x
    path result carries a rounding of 2^-8 / 2^-11: x_next's summed
    gradient is stored in them); float32 activations: a TF32 product 2e-3,
    else 1e-5; times max(1, kappa) (the Sinkhorn gradient's cancellation
    carries into every gradient downstream of it) and max(1, dot) (a sum
    over C much smaller than its terms: `dot_condition`)."""
    base = 1e-2 if cfg["act"] != "f32" else 2e-3 if cfg["tf32"] else 1e-5
    return base * max(1.0, kappa) * max(1.0, dot)


def rel(a, b):
    return ((a.double() - b).norm() / b.norm().clamp_min(1e-300)).item()


CONFIGS = [dict(n=n, act=act, layout=lay, C=C, M=M, mode=mode, tf32=tf32, weight=w, bias=b, norm_eps=ne,
                pre_eps=pe, **({"param": p} if p else {}))
           for (n, act, lay, C, M, mode, tf32, w, b, ne, pe, p) in [
               (4, "bf16", "cn", 4096, 128, "log", True, False, False, 1.1920929e-07, 0.0, None),  # the bench's
               (4, "bf16", "nc", 7168, 77, "softmax_eps", False, True, True, 1e-6, 1e-6, None),
               (4, "bf16", "nc", 2048, 4096 + 1, "log", True, True, True, 1e-6, 1e-6, "bf16"),
               (1, "f32", "nc", 64, 1, "log", False, False, True, 1e-6, 1e-6, None),
               (2, "f16", "cn", 1000, 7, "softmax_eps", False, True, False, 1e-6, 1e-6, None),
               (3, "f32", "cn", 64, 70000, "log", False, False, False, 1e-6, 1e-6, None),  # M > 65535
               (5, "bf16", "nc", 1000 + 8, 33, "log", True, False, True, 1e-6, 0.0, None),
               (6, "f16", "nc", 1000, 5, "softmax_eps", False, True, True, 1e-6, 1e-6, None),
               (7, "bf16", "cn", 520, 300, "softmax_eps", True, True, False, 1e-6, 1e-6, None),
               (8, "bf16", "cn", 2048, 300, "log", True, False, True, 1e-6, 1e-6, None),
               (8, "bf16", "nc", 1024, 1000, "softmax_eps", True, False, False, 1e-6, 1e-6, None),  # not fused
               (8, "f32", "nc", 96, 3, "log", False, True, True, 1e-6, 1e-6, None),
               (8, "bf16", "nc", 1001, 65, "log", True, True, True, 1e-6, 1e-6, None),  # odd C
               (4, "bf16", "cn", 5129, 128, "log", True, False, True, 1.1920929e-07, 0.0, None),  # K % 8 = 4
               (3, "bf16", "nc", 5127, 300, "softmax_eps", False, True, True, 1e-6, 1e-6, None),  # odd K
           ]]


def _id(c):
    return "n{n}-{act}-{layout}-C{C}-M{M}-{mode}-tf32{tf32:d}-w{weight:d}-b{bias:d}".format(**c)


def _run_twice(op, *args):
    a, b = op(*args), op(*args)
    for u, v in zip(a, b):
        assert torch.equal(u, v), "two runs differ"
    return a


@pytest.mark.parametrize("cfg", CONFIGS, ids=_id)
def test_seam_matches_float64(cfg):
    """post_pre_saved and post_pre_backward against float64 SPEC.md, every
    result and every gradient (each stage of the forward on the kernel's own
    inputs to it, the gradient on the op's own inputs), run to run bitwise;
    post_pre is post_pre_saved's four; where the kernels exist (the seam's,
    or the separate ops' with acc) no call falls back to the reference."""
    gen = torch.Generator(device="cuda").manual_seed(case_seed("seam", _id(cfg)))
    t = inputs(cfg, gen)
    a = attrs(cfg)
    fwd = tuple(t[k] for k in FWD_ARGS)
    before = mhc._C.stats()
    saved = _run_twice(torch.ops.mhc.post_pre_saved, *fwd, *a)
    x_next, h, ms, pre, post_next, logits, P_next, y = saved
    plain = torch.ops.mhc.post_pre(*fwd, *a)
    for u, v in zip(plain, (x_next, y, post_next, P_next)):
        assert torch.equal(u, v)
    gouts = [torch.randn(o.shape, generator=gen, device="cuda").to(o.dtype) for o in (x_next, y, post_next, P_next)]
    grads = _run_twice(torch.ops.mhc.post_pre_backward, *gouts, *fwd[:5], x_next, h, ms, pre, logits, *fwd[5:], *a)
    after = mhc._C.stats()
    if no_reference(cfg):
        assert after["reference_calls"] == before["reference_calls"], (before, after)
    if seam_kernel(cfg, "fwd") and seam_kernel(cfg, "bwd"):
        assert after["kernel_calls"] - before["kernel_calls"] == 5, (before, after)
    checks = [(name, g, w, b) for name, g, w, b in forward64(cfg, t, saved)]
    want, bounds = backward64(cfg, t, saved, gouts)
    by_name = dict(zip(("gx", "gf", "gpost", "gP", "gbias", "gphi", "galpha", "gbeta", "gweight"), grads))
    checks += [(name, by_name[name], w, bounds[name]) for name, w in want.items()]
    for name, g, w, b in checks:
        w = w.detach()
        err = rel(g.reshape(w.shape), w)
        RESULTS.append((name, err, b, _id(cfg)))
        assert torch.isfinite(g).all(), f"{name}: non-finite ({cfg})"
        assert err <= b, f"{name}: rel err {err:.3e} > {b:.0e} ({cfg})"
    if not cfg["bias"]:
        assert grads[4].numel() == 0
    if not cfg["weight"]:
        assert grads[8].numel() == 0


@pytest.mark.parametrize("cfg", [c for c in CONFIGS if c["M"] <= 4096], ids=_id)
def test_fused_is_post_then_pre(cfg):
    """mhc.post_pre against mhc.post then mhc.pre, each its own autograd
    node: the same forward bits (the seam kernel keeps the unfused ops'
    instruction order); the gradients within float64 SPEC.md's bounds of
    each other, and where the separate ops run their kernels (no seam
    kernel, acc generated), the parameters' bit for bit (the same backward
    kernels on the same values)."""
    gen = torch.Generator(device="cuda").manual_seed(case_seed("unfused", _id(cfg)))
    t = {k: None if v is None else v.requires_grad_() for k, v in inputs(cfg, gen).items()}
    n, layout, tf32, norm_eps, pre_eps, post_mult, mode, iters, eps = attrs(cfg)
    kw = dict(layout=layout, tf32=tf32, norm_eps=norm_eps, pre_eps=pre_eps, post_mult=post_mult, mode=mode,
              iters=iters, eps=eps)
    fused = mhc.post_pre(t["f"], t["post"], t["x"], t["P"], t["phi"], t["alpha"], t["beta"], t["weight"], t["bias"],
                         **kw)
    x_next = mhc.post(t["f"], t["post"], t["x"], t["P"], t["bias"], layout=layout)
    unfused = (x_next, *mhc.pre(x_next, t["phi"], t["alpha"], t["beta"], t["weight"], **kw))
    for name, u, v in zip(("x_next", "y", "post_next", "P_next"), fused, unfused):
        assert torch.equal(u, v), name
    leaves = {k: v for k, v in t.items() if v is not None}
    g = [torch.randn(o.shape, generator=gen, device="cuda").to(o.dtype) for o in fused]
    gf = torch.autograd.grad(fused, list(leaves.values()), g)
    gu = torch.autograd.grad(unfused, list(leaves.values()), g)
    separate = not (seam_kernel(cfg, "fwd") and seam_kernel(cfg, "bwd")) and no_reference(cfg)
    with torch.no_grad():
        saved = torch.ops.mhc.post_pre_saved(*(t[k] for k in FWD_ARGS), *attrs(cfg))
    bounds = backward64(cfg, t, saved, g)[1]
    for name, u, v in zip(leaves, gf, gu):
        b = bounds["g" + name]
        if separate and name in ("phi", "alpha", "beta", "weight"):
            assert torch.equal(u, v), name
        err = rel(u, v.double())
        RESULTS.append((f"fused-vs-unfused {name}", err, b, _id(cfg)))
        assert err <= b, (name, err)


# The fused backward's specs (n = 4, bf16, f32 parameters, (C, n), sm_90a:
# codegen/kernels/seam/BackwardFused.cpp; elsewhere the same tests check the
# composed backward): the benchmark's conventions (tf32, no weight: the paced
# projection kernel from enough tokens), tf32 with a weight, precise with a
# weight and bias; M = 1, odd and > 65535; C off the kernels' column blocks.
FUSED_BWD = [dict(CONFIGS[0], M=M, C=C, tf32=tf32, weight=w, bias=b, mode=mode)
             for (M, C, tf32, w, b, mode) in [
                 (333, 4096, True, False, False, "log"),  # the bench's conventions
                 (1, 7168, True, False, True, "log"),
                 (70001, 256, True, False, True, "log"),  # M > 65535, paced
                 (77, 1000, True, True, False, "softmax_eps"),
                 (333, 1002, False, True, True, "softmax_eps"),  # odd C / 2
             ]]


def composed_backward(cfg, t, saved, gouts):
    """The seam's gradient as the chain of separate ops it replaces
    (docs/design/seam.md, "The contract"), each its own kernel: aggregate
    with acc = gx_next, sinkhorn, scale, project with acc = aggregate's gx,
    expand_combine; in post_pre_backward's result order."""
    n, layout, tf32, norm_eps, pre_eps, post_mult, mode, iters, eps = attrs(cfg)
    x_next, h, ms, pre, _, logits, _, _ = saved
    gx_next, gy, gpost_next, gP_next = gouts
    o = torch.ops.mhc
    g1, gpre = o.aggregate_backward(gy, x_next, pre, n, layout, gx_next)
    glogits = o.sinkhorn_backward(gP_next, logits, n, mode, iters, eps)
    gh, gms, galpha, gbeta = o.scale_backward(gpre, gpost_next, glogits, h, ms, t["alpha"], t["beta"], n,
                                              norm_eps, pre_eps, post_mult)
    g, gphi, gweight = o.project_backward(gh, gms, x_next, t["phi"], t["weight"], n, layout, tf32, g1)
    gf, gpost, gx, gP, gbias = o.expand_combine_backward(g, t["f"], t["post"], t["x"], t["P"], t["bias"], n, layout)
    return gx, gf, gpost, gP, gbias, gphi, galpha, gbeta, gweight


@pytest.mark.parametrize("cfg", FUSED_BWD, ids=_id)
def test_fused_backward_is_the_composed_chain(cfg):
    """post_pre_backward (on sm_90a the fused backward: aggregate's gx
    formed in the projection backward) against the separate ops' chain,
    bitwise, every gradient: the fused kernels keep the parts' instructions
    and summation orders (docs/design/seam.md, "The fused backward"); run to
    run bitwise; one kernel call each, no reference; within SPEC.md's bounds
    of float64."""
    gen = torch.Generator(device="cuda").manual_seed(case_seed("fused-bwd", _id(cfg)))
    t = inputs(cfg, gen)
    a = attrs(cfg)
    fwd = tuple(t[k] for k in FWD_ARGS)
    saved = torch.ops.mhc.post_pre_saved(*fwd, *a)
    x_next, h, ms, pre, post_next, logits, P_next, y = saved
    gouts = [torch.randn(o.shape, generator=gen, device="cuda").to(o.dtype) for o in (x_next, y, post_next, P_next)]
    assert seam_kernel(cfg, "bwd"), mhc._C.unsupported_reason(seam_spec(cfg, "bwd"))
    before = mhc._C.stats()
    grads = _run_twice(torch.ops.mhc.post_pre_backward, *gouts, *fwd[:5], x_next, h, ms, pre, logits, *fwd[5:], *a)
    after = mhc._C.stats()
    assert after["kernel_calls"] - before["kernel_calls"] == 2, (before, after)
    assert after["reference_calls"] == before["reference_calls"], (before, after)
    names = ("gx", "gf", "gpost", "gP", "gbias", "gphi", "galpha", "gbeta", "gweight")
    for name, u, v in zip(names, grads, composed_backward(cfg, t, saved, gouts)):
        if v.numel() == 0:  # gbias without bias, gweight without weight
            assert u.numel() == 0, name
            continue
        assert u.shape == v.shape and u.dtype == v.dtype, name
        assert torch.equal(u, v), f"{name} differs from the separate ops' ({cfg})"
    want, bounds = backward64(cfg, t, saved, gouts)
    by_name = dict(zip(names, grads))
    for name, w in want.items():
        err = rel(by_name[name].reshape(w.shape), w.detach())
        RESULTS.append((f"fused-bwd {name}", err, bounds[name], _id(cfg)))
        assert torch.isfinite(by_name[name]).all(), name
        assert err <= bounds[name], f"{name}: rel err {err:.3e} > {bounds[name]:.0e} ({cfg})"


def test_mixed_parameter_dtypes_run_the_separate_ops():
    """bf16 alpha, beta and bias with f32 phi: no single seam spec (one
    param dtype); the separate ops run, each with its own kernel: mhc.post
    then mhc.pre's bits, forward and gradients."""
    cfg = dict(CONFIGS[1], M=40, C=512)
    gen = torch.Generator(device="cuda").manual_seed(case_seed("mixed"))
    t = inputs(cfg, gen)
    t.update(alpha=t["alpha"].bfloat16(), beta=t["beta"].bfloat16(), bias=t["bias"].bfloat16())
    a = attrs(cfg)
    before = mhc._C.stats()
    got = torch.ops.mhc.post_pre(*(t[k] for k in FWD_ARGS), *a)
    after = mhc._C.stats()
    x_next = torch.ops.mhc.expand_combine(t["f"], t["post"], t["x"], t["P"], t["bias"], cfg["n"], cfg["layout"])
    want = (x_next, *torch.ops.mhc.pre(x_next, t["phi"], t["alpha"], t["beta"], t["weight"], *a))
    for u, v in zip(got, want):
        assert torch.equal(u, v)
    # expand_combine, then the pre step as four ops (no fused pre spec either).
    assert after["kernel_calls"] - before["kernel_calls"] == 5, (before, after)
    assert after["reference_calls"] == before["reference_calls"], (before, after)


def _stack(fused, n=4, C=512, L=4, dtype=torch.bfloat16, **kw):
    torch.manual_seed(7)
    blocks = [nn.Sequential(nn.Linear(C, C), nn.GELU()) for _ in range(L)]
    stack = mhc.HyperConnectionStack(blocks, n, C, fused=fused, bias=True, **kw).cuda()
    with torch.no_grad():
        for layer in stack.layers:
            layer.alpha.copy_(torch.rand(3) + 0.5)
            layer.beta.normal_(0, 0.5)
            layer.bias.normal_(0, 0.5)
    return stack.to(dtype) if dtype != torch.float32 else stack


def _step(stack, x):
    for p in stack.parameters():
        p.grad = None
    xs = x.detach().clone().requires_grad_()
    out = stack(xs)
    out.float().square().sum().backward()
    return [out.detach()] + [xs.grad] + [p.grad.clone() for p in stack.parameters()]


@pytest.mark.parametrize("layout", ["nc", "cn"])
def test_stack_is_deterministic_and_matches_the_unfused_stack(layout):
    """A 4-layer fused stack (bf16 blocks and activations, float32 mixing):
    forward and every gradient bitwise run to run; the forward bitwise the
    unfused stack's, the gradients within bf16's 1e-2 of it."""
    stack = _stack(True, layout=layout, dtype=torch.float32)
    for block in stack.blocks:
        block.to(torch.bfloat16)
    x = torch.randn((256, 4, 512) if layout == "nc" else (256, 512, 4), device="cuda").bfloat16()
    first, again = _step(stack, x), _step(stack, x)
    for a, b in zip(first, again):
        assert torch.equal(a, b)
    stack.fused = False
    unfused = _step(stack, x)
    assert torch.equal(first[0], unfused[0])
    for a, b in zip(first[1:], unfused[1:]):
        err = rel(a, b.double())
        RESULTS.append(("stack fused-vs-unfused", err, 1e-2, layout))
        assert err <= 1e-2


def test_compile_fullgraph_of_a_stack():
    """torch.compile(fullgraph=True) of a fused float32 stack: its output and
    every gradient within SPEC.md's float32 1e-5 of eager's (Inductor's own
    kernels for the blocks sum in their own order)."""
    torch._dynamo.reset()
    stack = _stack(True, dtype=torch.float32, mode="log")
    x = torch.randn(64, 4, 512, device="cuda")
    eager = _step(stack, x)
    compiled = _step(torch.compile(stack, fullgraph=True), x)
    for a, b in zip(compiled, eager):
        err = rel(a, b.double())
        RESULTS.append(("compiled-vs-eager", err, 1e-5, "stack"))
        assert err <= 1e-5


def test_cuda_graph_capture_of_a_training_step():
    """Forward and backward of a fused stack captured in one CUDA graph: the
    replay gives eager's output and gradients bit for bit, for new inputs too."""
    stack = _stack(True, dtype=torch.float32)
    static_x = torch.randn(64, 4, 512, device="cuda", requires_grad=True)

    def step():
        out = stack(static_x)
        out.square().sum().backward()
        return out

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):  # warm-up: compiles every kernel, builds the grads
            stack.zero_grad(set_to_none=True)
            static_x.grad = None
            step()
    torch.cuda.current_stream().wait_stream(s)
    stack.zero_grad(set_to_none=True)
    static_x.grad = None
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        static_out = step()
    # The graph's gradient buffers (the eager steps below set .grad anew).
    static_grads = [static_x.grad] + [p.grad for p in stack.parameters()]
    for _ in range(2):
        with torch.no_grad():
            static_x.copy_(torch.randn_like(static_x))
        g.replay()
        torch.cuda.synchronize()
        got = [static_out.clone()] + [t.clone() for t in static_grads]
        want = _step(stack, static_x.detach())
        for a, b in zip(got, want):
            assert torch.equal(a, b)


# Runs in a fresh process: its autograd device thread and a new Python thread
# launch with no CUDA context of their own (the runtime must make the kernel's
# current). Identity blocks and direct calls beforehand, as in
# bench/probes/host_costs.py, where the bug showed: the backward's first call
# on the device thread is the last post's expand_combine_backward, whose output
# blocks the caching allocator already holds, so no CUDA runtime call (no
# cudaMalloc, no PyTorch kernel) makes a context current before mhc launches.
THREADS_SCRIPT = textwrap.dedent("""
    import threading, torch, mhc
    from torch import nn
    M, C, n = 256, 512, 4
    torch.manual_seed(0)
    stack = mhc.HyperConnectionStack([nn.Identity() for _ in range(4)], n, C, layout="cn", tf32=True,
                                     mode="log").cuda()
    x = torch.randn(M, C, n, device="cuda").bfloat16().requires_grad_()
    gout = torch.randn(M, C, n, device="cuda").bfloat16()
    f = torch.randn(M, C, device="cuda").bfloat16()
    post, P = torch.rand(M, n, device="cuda"), torch.rand(M, n, n, device="cuda")
    args = (gout, f, post, x.detach(), P, None, n, "cn", None)
    bwd = torch.ops.mhc.expand_combine_backward
    fwd = lambda: torch.ops.mhc.expand_combine(f, post, x.detach(), P, None, n, "cn")
    want, fwd_want = bwd(*args), fwd()
    bwd(*args), fwd()  # results dropped at once: their blocks stay in the caching allocator
    torch.cuda.synchronize()

    got = {}
    def in_thread():
        try:
            got["fwd"] = fwd()
            got["bwd"] = bwd(*args)
            torch.cuda.synchronize()
        except Exception as e:
            got["error"] = repr(e)
    t = threading.Thread(target=in_thread)
    t.start()
    t.join()
    assert "error" not in got, "new thread: " + got["error"]
    assert torch.equal(got["fwd"], fwd_want)
    assert all(torch.equal(a, b) for a, b in zip(got["bwd"], want))

    params = list(stack.parameters())
    out = stack(x)
    bwd(*args), bwd(*args)  # the blocks of the backward's first call's outputs, cached
    torch.cuda.synchronize()
    first = torch.autograd.grad(out, [x] + params, gout)  # the process's first backward
    second = torch.autograd.grad(stack(x), [x] + params, gout)
    torch.cuda.synchronize()
    assert all(torch.equal(a, b) for a, b in zip(first, second))
    print("ok", mhc._C.stats()["reference_calls"])
""")


def test_threads_without_a_cuda_context_launch():
    """The autograd engine's device thread (the process's first backward, an
    identity-block stack) and a new Python thread launch mhc kernels: the
    runtime makes the kernel's context current on the calling thread (before,
    such a launch failed with CUDA driver error 201, invalid device context);
    the results are bitwise the main thread's, and no call fell back."""
    r = subprocess.run([sys.executable, "-c", THREADS_SCRIPT], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.split() == ["ok", "0"], r.stdout + r.stderr


def test_opcheck_cuda():
    cfg = dict(CONFIGS[1], M=7, C=256)
    gen = torch.Generator(device="cuda").manual_seed(SEED)
    t = inputs(cfg, gen)
    fwd = tuple(t[k] for k in FWD_ARGS)
    a = attrs(cfg)
    x_next, h, ms, pre, post_next, logits, P_next, y = torch.ops.mhc.post_pre_saved(*fwd, *a)
    bwd = (torch.randn_like(x_next), torch.randn_like(y), torch.randn_like(post_next), torch.randn_like(P_next),
           *fwd[:5], x_next, h, ms, pre, logits, *fwd[5:], *a)
    grad_args = tuple(v.detach().requires_grad_() if isinstance(v, torch.Tensor) else v for v in (*fwd, *a))
    torch.library.opcheck(torch.ops.mhc.post_pre, grad_args)
    torch.library.opcheck(torch.ops.mhc.post_pre_saved, grad_args)
    torch.library.opcheck(torch.ops.mhc.post_pre_backward, bwd)


def test_zz_summary():
    """Prints the worst error per output against its bound (last test)."""
    worst = {}
    for name, err, b, where in RESULTS:
        if name not in worst or err / b > worst[name][0] / worst[name][1]:
            worst[name] = (err, b, where)
    kernels = {d: mhc._C.unsupported_reason(seam_spec(CONFIGS[0], d)) or "generated" for d in ("fwd", "bwd")}
    acc = mhc._C.unsupported_reason(acc_specs(CONFIGS[0])[1]) or "generated"
    lines = [f"device: {torch.cuda.get_device_name()}  seed: {SEED}  checks: {len(RESULTS)}  "
             f"seam kernels: fwd {kernels['fwd']}; bwd {kernels['bwd']}; project.bwd with acc: {acc}"]
    for name in sorted(worst):
        err, b, where = worst[name]
        lines.append(f"  {name:28s} worst rel err {err:.3e}  bound {b:.0e}  ({where})")
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "seam-summary.txt"), "w") as f:
            f.write("\n".join(lines) + "\n")
        with open(os.path.join(out, "seam-results.json"), "w") as f:
            json.dump(RESULTS, f)
    print("\n".join(lines))
