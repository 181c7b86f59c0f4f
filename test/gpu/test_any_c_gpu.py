"""Any C (issue 35): the kernels at K = n*C not a multiple of 8, on CUDA.

Where x's rows are only 8-, 4- or 2-byte aligned (C = 5129 at n = 4: K % 8
= 4; n and C odd: K odd) the projection's TMA / bulk-copy variants step
aside and the generic ones run in accesses as wide as the rows allow, with
a tail masked at K (docs/design/project.md, "Any K"). Here, for n 1..8, both
layouts, bf16/f16/f32 activations, tf32 on and off, weight or not, small and
large M (many splits, one split):
- the projection forward and backward against float64 SPEC.md (MATH.md's
  bounds), two runs bitwise equal, every call a generated kernel (zero
  reference calls in mhc._C.stats());
- the fused pre step bit for bit the four separate ops, on the kernel path;
- aggregate and expand_combine (forward, backward) at the same C.

    python3 -m pytest -q test/gpu/test_any_c_gpu.py
"""

import itertools
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
ACTS = ("bf16", "f16", "f32")
CS = (5129, 5127, 33, 4097)  # K % 8: 4n, odd at odd n, ...; 33: K < 64 at n = 1
MS = (1, 77, 4096 + 3)


def case_seed(*key):
    return SEED + zlib.crc32(repr(key).encode()) % 100000


def spec(op, d, n, act, layout, C, tf32=False, weight=False, bias=False):
    return dict(op=op, dir=d, n=n, act=act, layout=layout, C=C, mode="log", iters=20, eps=0.0, tf32=tf32,
                weight=weight, bias=bias, param="f32", norm_eps=1e-6, pre_eps=1e-6, post_mult=2.0)


def call(s, t):
    n, lay, o = s["n"], s["layout"], torch.ops.mhc
    if s["op"] == "project":
        if s["dir"] == "fwd":
            h, ms = o.project(t["x"], t["phi"], t.get("weight"), n, lay, s["tf32"])
            return {"h": h, "ms": ms}
        gx, gphi, gw = o.project_backward(t["gh"], t["gms"], t["x"], t["phi"], t.get("weight"), n, lay, s["tf32"])
        return {"gx": gx, "gphi": gphi, **({"gweight": gw} if "weight" in t else {})}
    if s["op"] == "aggregate":
        if s["dir"] == "fwd":
            return {"y": o.aggregate(t["x"], t["pre"], n, lay)}
        return dict(zip(["gx", "gpre"], o.aggregate_backward(t["gy"], t["x"], t["pre"], n, lay)))
    if s["dir"] == "fwd":
        return {"out": o.expand_combine(t["f"], t["post"], t["x"], t["P"], t.get("bias"), n, lay)}
    gf, gpost, gx, gP, gb = o.expand_combine_backward(t["gout"], t["f"], t["post"], t["x"], t["P"], t.get("bias"),
                                                      n, lay)
    return {"gf": gf, "gpost": gpost, "gx": gx, "gP": gP, **({"gbias": gb} if "bias" in t else {})}


def check_on_kernel_path(s, M, seed):
    """Two calls: float64 bounds, the same bits, both generated kernels."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    t = make_inputs(s, M, gen)
    before = mhc._C.stats()
    got, again = call(s, t), call(s, t)
    torch.cuda.synchronize()
    after = mhc._C.stats()
    assert after["reference_calls"] == before["reference_calls"], (s, before, after)
    assert after["kernel_calls"] - before["kernel_calls"] == 2, (s, before, after)
    want = reference(s, t)
    for k, g in got.items():
        r = want[k].detach().reshape(-1)
        g64 = g.reshape(-1).double()
        err = ((g64 - r).norm() / r.norm().clamp_min(1e-300)).item()
        b = bound(s, g.dtype)
        assert torch.isfinite(g64).all(), f"{k}: non-finite ({s}, M={M})"
        assert err <= b, f"{k}: rel err {err:.3e} > {b:.0e} ({s}, M={M})"
        assert torch.equal(g, again[k]), f"{k}: two runs differ ({s}, M={M})"


# Every n with every C; act, layout, tf32, weight and M cycle over the cases.
PROJECT = [dict(n=n, C=C, act=ACTS[i % 3], layout=("nc", "cn")[(i // 3) % 2], tf32=bool(i % 2),
                weight=bool((i // 2) % 2), M=MS[i % 3])
           for i, (n, C) in enumerate(itertools.product(range(1, 9), CS)) if (n * C) % 8 != 0]


@pytest.mark.parametrize("cfg", PROJECT, ids=lambda c: "n{n}-C{C}-{act}-{layout}-tf32{tf32:d}-w{weight:d}-M{M}".format(**c))
@pytest.mark.parametrize("d", ("fwd", "bwd"))
def test_projection_at_any_k(d, cfg):
    s = spec("project", d, cfg["n"], cfg["act"], cfg["layout"], cfg["C"], tf32=cfg["tf32"], weight=cfg["weight"])
    check_on_kernel_path(s, cfg["M"], case_seed("project", d, tuple(cfg.values())))


# The flagship's shape next to the aligned C's (C = 5129: K % 8 = 4; 7167:
# K % 8 = 4) with every switch: bf16, n = 4, both tf32 modes, weight or
# not, M with many splits and with one.
FLAGSHIP = [dict(n=4, C=C, act="bf16", layout=lay, tf32=tf32, weight=w, M=M)
            for C, lay, tf32, w, M in itertools.product((5129, 7167), ("cn", "nc"), (True, False), (False, True),
                                                        (300, 32768))]


@pytest.mark.parametrize("cfg", FLAGSHIP, ids=lambda c: "C{C}-{layout}-tf32{tf32:d}-w{weight:d}-M{M}".format(**c))
@pytest.mark.parametrize("d", ("fwd", "bwd"))
def test_flagship_shape_at_odd_c(d, cfg):
    s = spec("project", d, 4, "bf16", cfg["layout"], cfg["C"], tf32=cfg["tf32"], weight=cfg["weight"])
    check_on_kernel_path(s, cfg["M"], case_seed("flagship", d, tuple(cfg.values())))


# The block ring at K % 8 = 4 (rows 8-byte aligned, each copied from the
# 16-byte boundary below it and read back at its shift; rows past M repeat
# row M - 1, whose shift may differ): n = 2 and 4 (a lane's 16-byte run) and
# n = 6 (8-byte runs) at M = 1, 2, 9 (rows past M of both parities) and
# 4099, f16 and bf16, weight or not (paced or not).
RING_ROWS = [dict(n=n, C=C, act=act, layout="cn", tf32=True, weight=w, M=M)
             for (n, C), act, w, M in itertools.product(
                 ((2, 4098), (4, 5129), (6, 4098)), ("bf16", "f16"), (False, True), (1, 2, 9, 4099))]


@pytest.mark.parametrize("cfg", RING_ROWS, ids=lambda c: "n{n}-C{C}-{act}-w{weight:d}-M{M}".format(**c))
def test_block_ring_at_k_mod_8_eq_4(cfg):
    s = spec("project", "bwd", cfg["n"], cfg["act"], cfg["layout"], cfg["C"], tf32=cfg["tf32"], weight=cfg["weight"])
    check_on_kernel_path(s, cfg["M"], case_seed("ring", tuple(cfg.values())))


# The staged forward at K % 8 == 4 (bf16 x: pack + bulk-copy ring, the last
# chunk masked at K) for every n that has such K (n = 8 has none): one M
# per case from 1 (one token block: the partial packs its chunks itself)
# to many splits; tf32 on (n >= 6: wgmma with the next chunk's x loaded
# ahead) and off. C = 9 at n = 4: K = 36, one 32-column chunk and 4 columns.
STAGED = [dict(n=n, C=C, act="bf16", layout=("cn", "nc")[i % 2], tf32=bool((i // 2) % 2), weight=bool(i % 3 == 0),
               M=(1, 77, 4099, 130)[i % 4])
          for i, (n, C) in enumerate([(1, 5124), (2, 5122), (3, 5124), (4, 9), (4, 9), (5, 5124), (6, 5126),
                                      (6, 5126), (7, 5124), (7, 5124), (4, 7167), (4, 33)])]
assert all((c["n"] * c["C"]) % 8 == 4 for c in STAGED)


@pytest.mark.parametrize("cfg", STAGED, ids=lambda c: "n{n}-C{C}-{layout}-tf32{tf32:d}-w{weight:d}-M{M}".format(**c))
def test_staged_forward_at_k_mod_8_is_4(cfg):
    s = spec("project", "fwd", cfg["n"], "bf16", cfg["layout"], cfg["C"], tf32=cfg["tf32"], weight=cfg["weight"])
    check_on_kernel_path(s, cfg["M"], case_seed("staged", tuple(cfg.values())))


ELEMENTWISE = [dict(op=op, d=d, n=n, C=C, act=act, layout=lay)
               for i, (op, d, (n, C), act, lay) in enumerate(itertools.product(
                   ("aggregate", "expand_combine"), ("fwd", "bwd"), ((3, 5127), (4, 5129), (8, 33)), ("bf16", "f32"),
                   ("nc", "cn")))]


@pytest.mark.parametrize("cfg", ELEMENTWISE, ids=lambda c: "{op}-{d}-n{n}-C{C}-{act}-{layout}".format(**c))
def test_elementwise_ops_at_odd_c(cfg):
    s = spec(cfg["op"], cfg["d"], cfg["n"], cfg["act"], cfg["layout"], cfg["C"], bias=cfg["op"] == "expand_combine")
    check_on_kernel_path(s, 77, case_seed(tuple(cfg.values())))


# M past the one-launch threshold (mhc._C.ONE_LAUNCH_MAX_TOKENS = 256): at
# or below it the pre step is serve's one-launch kernel, whose projection
# sums split differently (docs/design/serve.md; test_serve_gpu.py and
# test_seam_gpu.py's C = 5129, M = 128 case bound it against float64).
@pytest.mark.parametrize("n,C,act,layout,M", [(4, 5129, "bf16", "cn", 257), (6, 5126, "bf16", "nc", 301),
                                              (3, 5127, "bf16", "nc", 300),
                                              (1, 33, "f32", "cn", 1031), (5, 4097, "f16", "nc", 4099)])
def test_pre_step_at_odd_c_is_the_four_ops(n, C, act, layout, M):
    """torch.ops.mhc.pre on the kernel path at odd K, bit for bit the four
    separate ops (each of which the tests above bound against float64)."""
    assert M > mhc._C.ONE_LAUNCH_MAX_TOKENS, "the one-launch pre step is not the four ops bitwise"
    gen = torch.Generator(device="cuda").manual_seed(case_seed("pre", n, C, act, layout, M))
    p = spec("project", "fwd", n, act, layout, C, tf32=True, weight=True)
    t = make_inputs(p, M, gen)
    t.update({k: make_inputs(dict(p, op="scale"), 1, gen)[k] for k in ("alpha", "beta")})
    o = torch.ops.mhc
    args = (t["x"], t["phi"], t["alpha"], t["beta"], t["weight"], n, layout, True, 1e-6, 1e-6, 2.0, "log", 20, 0.0)
    before = mhc._C.stats()
    y, post, P = o.pre(*args)
    y2, post2, P2 = o.pre(*args)
    h4, ms4 = o.project(t["x"], t["phi"], t["weight"], n, layout, True)
    pre4, post4, logits4 = o.scale(h4, ms4, t["alpha"], t["beta"], n, 1e-6, 1e-6, 2.0)
    P4 = o.sinkhorn(logits4, n, "log", 20, 0.0)
    y4 = o.aggregate(t["x"], pre4, n, layout)
    torch.cuda.synchronize()
    after = mhc._C.stats()
    assert after["reference_calls"] == before["reference_calls"], (before, after)
    for name, a, b, c in (("y", y, y2, y4), ("post", post, post2, post4), ("P", P, P2, P4)):
        assert torch.equal(a, b), f"pre {name}: two runs differ"
        assert torch.equal(a, c), f"pre {name} differs from the separate ops"
