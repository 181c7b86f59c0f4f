"""The GPU suite of the pre step's backward (torch.ops.mhc.pre_backward; its
kernel spec pre.bwd, codegen/kernels/PreBackward.cpp; docs/design/seam.md,
"The pre step's backward"): on the flagship (n = 4, bf16, f32 parameters,
(C, n), sm_90a) one kernel spec with aggregate's x gradient folded into the
projection backward, with no acc, an activation-dtype acc and TE's f32
buffer (acc=f32); every gradient bitwise the separate backward ops' chain
(aggregate_backward / aggregate_backward_into on a copy of the buffer,
sinkhorn, scale, project with aggregate's gx as acc), run to run bitwise,
the buffer left as it was, within SPEC.md's bounds of float64; mhc.te's
mhc_generate_mix_and_aggregate takes it.

Run on the GPU machine by test/gpu/run-torch-suite.sh: pytest -q test/gpu/test_pre_backward_gpu.py
"""

import os
import sys
import zlib

import pytest
import torch

import mhc
from mhc import reference as ref
from mhc import te

sys.path.insert(0, os.path.dirname(__file__))
from test_seam_gpu import arch, f32_text, sinkhorn_grad64  # noqa: E402

assert torch.cuda.is_available(), "the GPU suite needs a GPU"
SEED = int(os.environ.get("MHC_SEED") or int.from_bytes(os.urandom(4), "little"))
NAMES = ("gx", "gphi", "galpha", "gbeta", "gweight")
FLT_EPS = torch.finfo(torch.float32).eps  # TE's norm_eps


def case_seed(*key):
    return SEED + zlib.crc32(repr(key).encode()) % 100000


def attrs(cfg):
    return (4, "cn", cfg["tf32"], FLT_EPS, 0.0, 2.0, "log", 20, 0.0)


def pre_bwd_spec(cfg):
    """pre.bwd's canonical spec of a case (checked by mhc._C.canonical_spec)."""
    acc = {"none": "", "act": ";acc=1", "f32": ";acc=f32"}[cfg["acc"]]
    s = (f"pre.bwd;n=4;act=bf16;param=f32;layout=cn;C={cfg['C']};tf32={int(cfg['tf32'])};"
         f"weight={int(cfg['weight'])};norm_eps={f32_text(FLT_EPS)};pre_eps=0;post_mult=2;mode=log;iters=20"
         f"{acc};arch={arch()}")
    assert mhc._C.canonical_spec(s) == s
    return s


def inputs(cfg, gen, device="cuda"):
    """The pre step's inputs, its saved forward (pre_saved), the upstream
    gradients (gy, gpost, gP) and acc (None, bf16, or the f32 buffer)."""
    M, C, n = cfg["M"], cfg["C"], 4
    N, K = 2 * n + n * n, n * C

    def rnd(*shape, scale=1.0, dtype=torch.float32):
        return (torch.randn(*shape, generator=gen, device=device) * scale).to(dtype)

    t = dict(x=rnd(M, C, n, dtype=torch.bfloat16), phi=rnd(N, K, scale=K ** -0.5),
             alpha=rnd(3).abs() + 0.5, beta=rnd(N, scale=0.5),
             weight=1 + rnd(K, scale=0.1) if cfg["weight"] else None)
    saved = torch.ops.mhc.pre_saved(t["x"], t["phi"], t["alpha"], t["beta"], t["weight"], *attrs(cfg))
    y, post, P, h, ms, pre, logits = saved
    t.update(h=h, ms=ms, pre=pre, logits=logits,
             gy=rnd(M, C, dtype=torch.bfloat16), gpost=rnd(M, n), gP=rnd(M, n, n))
    t["acc"] = {"none": None, "act": rnd(M, C, n, dtype=torch.bfloat16), "f32": rnd(M, C, n)}[cfg["acc"]]
    return t


def fused(cfg, t):
    return torch.ops.mhc.pre_backward(t["gy"], t["gpost"], t["gP"], t["x"], t["h"], t["ms"], t["pre"], t["logits"],
                                      t["phi"], t["alpha"], t["beta"], t["weight"], t["acc"], *attrs(cfg))


def composed(cfg, t):
    """The separate backward ops in turn, as the Pre node and mhc.te ran them
    before pre.bwd: aggregate's gx (acc plus its own; with the f32 buffer a
    copy of it plus its own, in f32, in place) is project's acc."""
    n, layout, tf32, norm_eps, pre_eps, post_mult, mode, iters, eps = attrs(cfg)
    o = torch.ops.mhc
    if cfg["acc"] == "f32":
        g1 = t["acc"].clone()
        gpre = o.aggregate_backward_into(t["gy"], t["x"], t["pre"], n, layout, buffer=g1)
    else:
        g1, gpre = o.aggregate_backward(t["gy"], t["x"], t["pre"], n, layout, t["acc"])
    glogits = o.sinkhorn_backward(t["gP"], t["logits"], n, mode, iters, eps)
    gh, gms, galpha, gbeta = o.scale_backward(gpre, t["gpost"], glogits, t["h"], t["ms"], t["alpha"], t["beta"], n,
                                              norm_eps, pre_eps, post_mult)
    gx, gphi, gw = o.project_backward(gh, gms, t["x"], t["phi"], t["weight"], n, layout, tf32, g1)
    return gx, gphi, galpha, gbeta, gw


def backward64(cfg, t):
    """float64 SPEC.md of the pre step's gradient on the op's own inputs
    (autograd of reference.py per step, nothing rounded), gx plus acc; and
    the Sinkhorn step's kappa."""
    n, layout, tf32, norm_eps, pre_eps, post_mult, mode, iters, eps = attrs(cfg)

    def d(v, grad=False):
        return None if v is None else v.detach().double().requires_grad_(grad)

    X, PRE = d(t["x"], True), d(t["pre"], True)
    g_agg, gpre = torch.autograd.grad(ref.aggregate(X, PRE, layout), (X, PRE), t["gy"].double())
    seam_cfg = dict(n=n, layout=layout, tf32=tf32, norm_eps=norm_eps, pre_eps=pre_eps, mode=mode)
    glogits, kappa = sinkhorn_grad64(seam_cfg, t["logits"], t["gP"])
    H, MS, A, B = (d(t[k], True) for k in ("h", "ms", "alpha", "beta"))
    gh, gms, galpha, gbeta = torch.autograd.grad(ref.scale(H, MS, A, B, n, norm_eps, pre_eps, post_mult),
                                                 (H, MS, A, B), (gpre, t["gpost"].double(), glogits))
    X, PHI, W = d(t["x"], True), d(t["phi"], True), d(t["weight"], t["weight"] is not None)
    g_proj, gphi, *gw = torch.autograd.grad(ref.project(X, PHI, W), [X, PHI] + ([W] if W is not None else []),
                                            (gh, gms))
    gx = g_agg + g_proj + (t["acc"].double() if t["acc"] is not None else 0)
    want = dict(gx=gx, gphi=gphi, galpha=galpha, gbeta=gbeta)
    want.update({"gweight": w for w in gw})
    return want, kappa


def bound(cfg, name, kappa):
    """SPEC.md: gx is stored in bf16 (1e-2); the parameters' gradients are
    f32 (tf32 products 2e-3, else 1e-5); times max(1, kappa)."""
    base = 1e-2 if name == "gx" else 2e-3 if cfg["tf32"] else 1e-5
    return base * max(1.0, kappa)


def rel(a, b):
    return ((a.double() - b).norm() / b.norm().clamp_min(1e-300)).item()


CONFIGS = [dict(C=4096, M=300, tf32=True, weight=False, acc=acc) for acc in ("none", "act", "f32")] + [
    dict(C=2048, M=7, tf32=False, weight=True, acc="f32"), dict(C=1024, M=1000, tf32=True, weight=True, acc="act"),
    dict(C=7168, M=1, tf32=True, weight=False, acc="none")]


def _id(c):
    return "C{C}-M{M}-tf32{tf32:d}-w{weight:d}-acc_{acc}".format(**c)


@pytest.fixture(scope="module", autouse=True)
def _kernels_built(tmp_path_factory):
    """Every spec the cases request (pre.bwd, and the separate ops of the
    chain they are compared with), recorded by a dry pass on the CPU and
    built in parallel before the first test (test/gpu/precompile.py)."""
    from precompile import build, device_arch, recorded_specs

    def dry(cfg):
        t = inputs(cfg, torch.Generator().manual_seed(0), device="cpu")
        fused(cfg, t)
        composed(cfg, t)

    specs = recorded_specs([lambda c=c: dry(c) for c in CONFIGS], device_arch())
    count, seconds = build(specs, tmp_path_factory.mktemp("pre-bwd-kernels"))
    print(f"\n{count} kernels built in {seconds:.1f} s")


@pytest.mark.parametrize("cfg", CONFIGS, ids=_id)
def test_pre_backward_is_the_composed_chain(cfg):
    """pre_backward: one pre.bwd kernel call (no reference), run to run
    bitwise, acc untouched, every gradient bitwise the separate ops' chain
    and within SPEC.md's bounds of float64."""
    assert mhc._C.unsupported_reason(pre_bwd_spec(cfg)) == ""
    gen = torch.Generator(device="cuda").manual_seed(case_seed("pre-bwd", _id(cfg)))
    t = inputs(cfg, gen)
    acc_before = None if t["acc"] is None else t["acc"].clone()
    before = mhc._C.stats()
    got, again = fused(cfg, t), fused(cfg, t)
    after = mhc._C.stats()
    assert after["kernel_calls"] - before["kernel_calls"] == 2, (before, after)
    assert after["reference_calls"] == before["reference_calls"], (before, after)
    if acc_before is not None:
        assert torch.equal(t["acc"], acc_before), "pre_backward wrote acc"
    for name, u, v in zip(NAMES, got, again):
        assert torch.equal(u, v), f"{name}: two runs differ ({cfg})"
    for name, u, v in zip(NAMES, got, composed(cfg, t)):
        if v.numel() == 0:
            assert u.numel() == 0, name
            continue
        assert u.shape == v.shape and u.dtype == v.dtype, name
        assert torch.equal(u, v), f"{name} differs from the separate ops' chain ({cfg})"
    want, kappa = backward64(cfg, t)
    by_name = dict(zip(NAMES, got))
    for name, w in want.items():
        err = rel(by_name[name].reshape(w.shape), w.detach())
        assert torch.isfinite(by_name[name]).all(), name
        assert err <= bound(cfg, name, kappa), f"{name}: rel err {err:.3e} > {bound(cfg, name, kappa):.0e} ({cfg})"


def test_te_mix_and_aggregate_takes_pre_backward():
    """mhc.te's mhc_generate_mix_and_aggregate with the buffer runs pre.bwd
    (one kernel call for the gradient, no reference), x's gradient bitwise
    the separate ops' chain with the buffer as f32 acc; the buffer afterwards
    as it was (aggregate's part is not stored in it)."""
    cfg = dict(C=4096, M=256, tf32=True, weight=False, acc="f32")
    gen = torch.Generator(device="cuda").manual_seed(case_seed("te-pre"))
    t = inputs(cfg, gen)
    buffer = t["acc"]
    kept = buffer.clone()
    xt = t["x"].clone().requires_grad_(True)
    out, H_post, H_res = te.mhc_generate_mix_and_aggregate(xt, t["phi"], t["alpha"], t["beta"].reshape(1, -1),
                                                           fused_grad_x_acc_buffer=buffer)
    before = mhc._C.stats()
    (gxt,) = torch.autograd.grad(out, xt, t["gy"])
    after = mhc._C.stats()
    assert after["kernel_calls"] - before["kernel_calls"] == 1, (before, after)
    assert after["reference_calls"] == before["reference_calls"]
    assert torch.equal(buffer, kept), "the buffer changed"
    t.update(gpost=torch.zeros_like(t["gpost"]), gP=torch.zeros_like(t["gP"]))
    assert torch.equal(gxt, composed(cfg, t)[0])
