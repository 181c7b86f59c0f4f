"""x's gradient summed inside the backward kernels (issue 34): on CUDA,
aggregate_backward, project_backward and expand_combine_backward with `acc`
run their generated kernel (spec field acc=1) and give, bit for bit, the
unfused backward's gx plus acc (`own.add(acc)`), the other outputs
unchanged; gx within SPEC.md's bounds of float64 MATH.md's own + acc; run to
run the same. n 1..8, both layouts, bf16 / f16 / f32, odd M including 1,
the token-ring kernels and every projection backward variant (mma.sync; the
one-wave and wgmma kernels, followed by their launch "acc":
docs/design/project.md).

Run on the GPU machine by test/gpu/run-torch-suite.sh.
"""

import os
import sys
import zlib

import pytest
import torch

import mhc

sys.path.insert(0, os.path.dirname(__file__))
from kernels import bound, make_inputs, reference  # noqa: E402

assert torch.cuda.is_available(), "the GPU suite needs a GPU"
SEED = int(os.environ.get("MHC_SEED") or int.from_bytes(os.urandom(4), "little"))
GX = {"aggregate": 0, "project": 0, "expand_combine": 2}  # gx's index among the op's outputs
NAMES = {"aggregate": ["gx", "gpre"], "project": ["gx", "gphi", "gweight"],
         "expand_combine": ["gf", "gpost", "gx", "gP", "gbias"]}


def spec(op, n, act="bf16", layout="nc", C=2048, tf32=False, weight=False, bias=False, param="f32"):
    return dict(op=op, dir="bwd", n=n, act=act, layout=layout, C=C, tf32=tf32, weight=weight, bias=bias,
                param=param)


def backward(s, t, acc=None):
    """The op's backward through torch.ops.mhc (acc: None or x's gradient
    from its other users); name -> tensor."""
    n, lay, o = s["n"], s["layout"], torch.ops.mhc
    if s["op"] == "project":
        out = o.project_backward(t["gh"], t["gms"], t["x"], t["phi"], t.get("weight"), n, lay, s["tf32"], acc)
    elif s["op"] == "aggregate":
        out = o.aggregate_backward(t["gy"], t["x"], t["pre"], n, lay, acc)
    else:
        out = o.expand_combine_backward(t["gout"], t["f"], t["post"], t["x"], t["P"], t.get("bias"), n, lay, acc)
    return dict(zip(NAMES[s["op"]], out))


def check_acc(s, M, key):
    seed = SEED + zlib.crc32(repr(key).encode()) % 100000
    gen = torch.Generator(device="cuda").manual_seed(seed)
    t = make_inputs(s, M, gen)
    acc = torch.randn(t["x"].shape, generator=gen, device="cuda").to(t["x"].dtype)
    where = f"({s}, M={M}, seed {seed})"
    before = mhc._C.stats()
    fused, again = backward(s, t, acc), backward(s, t, acc)
    unfused = backward(s, t)
    after = mhc._C.stats()
    # Three kernel calls, none on the reference path.
    assert after["kernel_calls"] - before["kernel_calls"] == 3, (before, after, where)
    assert after["reference_calls"] == before["reference_calls"], (before, after, where)
    gx = fused["gx"]
    assert gx.shape == t["x"].shape and gx.dtype == t["x"].dtype
    assert torch.equal(gx, unfused["gx"].add(acc)), f"gx is not own.add(acc) bit for bit {where}"
    for k, v in fused.items():
        assert torch.equal(v, again[k]), f"{k}: two runs differ {where}"
        if k != "gx" and (k != "gweight" or s["weight"]) and (k != "gbias" or s["bias"]):
            assert torch.equal(v, unfused[k]), f"{k} changed with acc {where}"
    want = reference(s, t)["gx"].detach().reshape(-1) + acc.reshape(-1).double()
    got = gx.reshape(-1).double()
    assert torch.isfinite(got).all(), f"gx: non-finite {where}"
    err = ((got - want).norm() / want.norm().clamp_min(1e-300)).item()
    b = bound(s, gx.dtype)
    assert err <= b, f"gx: rel err {err:.3e} > {b:.0e} {where}"
    # (GPU-CHECKS.md's element bound: 16 x bound x max|ref|.)
    assert (got - want).abs().max().item() <= 16 * b * want.abs().max().item(), f"gx: element error {where}"


# n 1..8 x both layouts x bf16 and f32 (f16 where n is odd, beside them);
# C and M (1, odd, past a block of tokens) cycle through the cases.
STREAMS = [dict(n=n, act=act, layout=layout, C=(64, 1000, 2048, 96, 7168)[i % 5], M=(1, 7, 4096 + 3, 33)[i % 4])
           for i, (n, layout, act) in enumerate(
               (n, layout, act) for n in range(1, 9) for layout in ("nc", "cn")
               for act in ("bf16", "f32") + (("f16",) if n % 2 else ()))]


# More tokens than a grid's y dimension holds (M > 65535), small C.
STREAMS += [dict(n=4, act="bf16", layout="nc", C=64, M=70001), dict(n=3, act="f32", layout="cn", C=64, M=70001)]


@pytest.mark.parametrize("cfg", STREAMS, ids=lambda c: "n{n}-{act}-{layout}-C{C}-M{M}".format(**c))
@pytest.mark.parametrize("op", ["aggregate", "expand_combine", "project"])
def test_acc_is_the_unfused_add(op, cfg):
    extra = {}
    if op == "expand_combine":
        extra = dict(bias=cfg["n"] % 3 == 0)
    if op == "project":
        extra = dict(weight=cfg["C"] % 2 == 0, tf32=cfg["n"] % 2 == 1)
    check_acc(spec(op, cfg["n"], cfg["act"], cfg["layout"], cfg["C"], **extra), cfg["M"], (op, tuple(cfg.values())))


# The token-ring kernels (n = 4 and 8, 2-byte activations, (C, n), sm_90+):
# acc is a third ring source. Piece widths 256 .. 32 channels, idle warps.
RING = [("aggregate", 8, "bf16", 7168, 4096 + 5), ("aggregate", 4, "f16", 1056, 7), ("aggregate", 4, "bf16", 192, 1),
        ("expand_combine", 8, "bf16", 7168, 33), ("expand_combine", 8, "f16", 4096, 4096 + 3),
        ("expand_combine", 4, "bf16", 96, 3), ("expand_combine", 4, "bf16", 2112, 65)]


@pytest.mark.parametrize("cfg", RING, ids=lambda c: "{}-n{}-{}-C{}-M{}".format(*c))
def test_acc_on_the_token_rings(cfg):
    op, n, act, C, M = cfg
    check_acc(spec(op, n, act, "cn", C, bias=op == "expand_combine" and C % 7 == 0), M, ("ring",) + cfg)


# Every projection backward variant: mma.sync with and without a weight
# (n = 4's paced producer warp at C = 7168), the one-wave kernel (n = 6, 8;
# K % 64 == 0, <= 8 boxes per SM) and the wgmma kernel (C = 9216, 2192):
# bf16, tf32, no weight, sm_90a; the last two then launch "acc".
PROJECT = [dict(n=4, layout="nc", C=7168, M=8192 + 5, tf32=True, weight=False),
           dict(n=4, layout="cn", C=4096, M=3, tf32=True, weight=False),
           dict(n=4, layout="nc", C=2048, M=129, tf32=False, weight=True),
           dict(n=8, layout="nc", C=2048, M=77, tf32=True, weight=False),       # one wave
           dict(n=8, layout="cn", C=4096, M=4096 + 63, tf32=True, weight=False),  # one wave
           dict(n=6, layout="cn", C=4096, M=1, tf32=True, weight=False),      # one wave
           dict(n=8, layout="nc", C=9216, M=300, tf32=True, weight=False),    # wgmma
           dict(n=8, layout="cn", C=2192, M=77, tf32=True, weight=False),     # wgmma
           dict(n=8, layout="nc", C=7168, M=2048 + 1, tf32=True, weight=True)]


@pytest.mark.parametrize("cfg", PROJECT, ids=lambda c: "n{n}-{layout}-C{C}-M{M}-tf32{tf32}-w{weight}".format(**c))
def test_acc_on_every_projection_backward_variant(cfg):
    s = spec("project", cfg["n"], "bf16", cfg["layout"], cfg["C"], tf32=cfg["tf32"], weight=cfg["weight"])
    check_acc(s, cfg["M"], ("project", tuple(cfg.values())))


@pytest.mark.parametrize("n,layout", [(4, "nc"), (4, "cn"), (2, "nc")])
def test_pre_gradient_is_the_unfused_sum(n, layout):
    """mhc.pre's backward passes aggregate's gx as project's acc: x's
    gradient is, bit for bit, project's gx plus aggregate's (the unfused
    add it replaces)."""
    M, C = 77, 1024
    gen = torch.Generator(device="cuda").manual_seed(SEED + n)
    s = dict(spec("project", n, "bf16", layout, C), dir="fwd")
    t = make_inputs(s, M, gen)
    t.update({k: make_inputs(dict(s, op="scale", param="f32", norm_eps=1e-6, pre_eps=1e-6, post_mult=2.0), 1, gen)[k]
              for k in ("alpha", "beta")})
    x = t["x"].detach().requires_grad_()
    attrs = (n, layout, False, 1e-6, 1e-6, 2.0, "log", 20, 0.0)
    y, post, P = torch.ops.mhc.pre(x, t["phi"], t["alpha"], t["beta"], None, *attrs)
    gy = torch.randn(y.shape, generator=gen, device="cuda").to(y.dtype)
    gpost, gP = (torch.randn(v.shape, generator=gen, device="cuda") for v in (post, P))
    (gx,) = torch.autograd.grad((y, post, P), x, (gy, gpost, gP))
    o = torch.ops.mhc
    _, _, _, h, ms, pre, logits = o.pre_saved(x.detach(), t["phi"], t["alpha"], t["beta"], None, *attrs)
    gx_agg, gpre = o.aggregate_backward(gy, x.detach(), pre, n, layout)
    glogits = o.sinkhorn_backward(gP, logits, n, "log", 20, 0.0)
    gh, gms, _, _ = o.scale_backward(gpre, gpost, glogits, h, ms, t["alpha"], t["beta"], n, 1e-6, 1e-6, 2.0)
    gx_proj, _, _ = o.project_backward(gh, gms, x.detach(), t["phi"], None, n, layout, False)
    assert torch.equal(gx, gx_proj.add(gx_agg))
