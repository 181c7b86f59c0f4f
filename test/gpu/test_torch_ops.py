"""The GPU suite of the PyTorch package: torch.ops.mhc.* on CUDA against
float64 MATH.md, determinism, the JIT's disk cache across processes, the
reference fallback, torch.compile(fullgraph=True) and CUDA graphs.

Run on the GPU machine by test/gpu/run-torch-suite.sh (after building the
extension and unpacking the compiler): pytest -q test/gpu/test_torch_ops.py
"""

import itertools
import json
import os
import subprocess
import sys
import textwrap
import zlib

import pytest
import torch

import mhc

sys.path.insert(0, os.path.dirname(__file__))
from kernels import DT, bound, cancellation, make_inputs, reference  # noqa: E402

assert torch.cuda.is_available(), "the GPU suite needs a GPU"
# Fresh each run; MHC_SEED=<the summary's seed> draws a failed run's inputs again.
SEED = int(os.environ.get("MHC_SEED") or int.from_bytes(os.urandom(4), "little"))
RESULTS = []  # (op, rel, bound, spec) for the summary


def case_seed(*key):
    """SEED plus a number fixed by the test case (crc32: hash() of a string
    is salted per process, so the seed alone would not give the inputs)."""
    return SEED + zlib.crc32(repr(key).encode()) % 100000


def spec(op, d, n, act="bf16", layout="nc", C=2048, mode="log", tf32=False, weight=False, bias=False,
         param="f32"):
    return dict(op=op, dir=d, n=n, act=act, layout=layout, C=C, mode=mode, iters=20, eps=1e-6,
                tf32=tf32, weight=weight, bias=bias, param=param, norm_eps=1e-6, pre_eps=1e-6, post_mult=2.0)


def call(s, t):
    """Runs the op of spec `s` through torch.ops.mhc; returns name -> tensor."""
    n, lay, o = s["n"], s["layout"], torch.ops.mhc
    if s["op"] == "project":
        if s["dir"] == "fwd":
            h, ms = o.project(t["x"], t["phi"], t.get("weight"), n, lay, s["tf32"])
            return {"h": h, "ms": ms}
        gx, gphi, gw = o.project_backward(t["gh"], t["gms"], t["x"], t["phi"], t.get("weight"), n, lay, s["tf32"])
        return {"gx": gx, "gphi": gphi, **({"gweight": gw} if "weight" in t else {})}
    if s["op"] == "scale":
        args = (n, s["norm_eps"], s["pre_eps"], s["post_mult"])
        if s["dir"] == "fwd":
            return dict(zip(["pre", "post", "logits"], o.scale(t["h"], t["ms"], t["alpha"], t["beta"], *args)))
        return dict(zip(["gh", "gms", "galpha", "gbeta"],
                        o.scale_backward(t["gpre"], t["gpost"], t["glogits"], t["h"], t["ms"], t["alpha"],
                                         t["beta"], *args)))
    if s["op"] == "sinkhorn":
        eps = s["eps"] if s["mode"] == "softmax_eps" else 0.0
        if s["dir"] == "fwd":
            return {"P": o.sinkhorn(t["logits"], n, s["mode"], s["iters"], eps)}
        return {"glogits": o.sinkhorn_backward(t["gP"], t["logits"], n, s["mode"], s["iters"], eps)}
    if s["op"] == "aggregate":
        if s["dir"] == "fwd":
            return {"y": o.aggregate(t["x"], t["pre"], n, lay)}
        return dict(zip(["gx", "gpre"], o.aggregate_backward(t["gy"], t["x"], t["pre"], n, lay)))
    if s["dir"] == "fwd":
        return {"out": o.expand_combine(t["f"], t["post"], t["x"], t["P"], t.get("bias"), n, lay)}
    gf, gpost, gx, gP, gb = o.expand_combine_backward(t["gout"], t["f"], t["post"], t["x"], t["P"], t.get("bias"),
                                                      n, lay)
    return {"gf": gf, "gpost": gpost, "gx": gx, "gP": gP, **({"gbias": gb} if "bias" in t else {})}


def check(s, M, seed, adjust=None):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    t = make_inputs(s, M, gen)
    if adjust:
        adjust(t, gen)
    got = call(s, t)
    again = call(s, t)
    want = reference(s, t)
    kappa = cancellation(s, t, want)
    name = f"{s['op']}.{s['dir']}"
    for k, g in got.items():
        r = want[k].detach().reshape(-1)
        g64 = g.reshape(-1).double()
        err = ((g64 - r).norm() / r.norm().clamp_min(1e-300)).item()
        b = bound(s, g.dtype, kappa)
        RESULTS.append((name, err, b, f"{s} M={M} {k}"))
        assert torch.isfinite(g64).all(), f"{name} {k}: non-finite output"
        assert err <= b, f"{name} {k}: rel err {err:.3e} > {b:.0e} ({s}, M={M})"
        assert torch.equal(g, again[k]), f"{name} {k}: two runs differ ({s}, M={M})"


OPS = [(op, d) for op in ("project", "scale", "sinkhorn", "aggregate", "expand_combine") for d in ("fwd", "bwd")]
CS, MS = (64, 1000, 4096, 7168), (1, 7, 4096)
CONFIGS = [dict(n=n, act=act, layout=lay, C=CS[i % 4], M=MS[i % 3], mode=("log", "softmax_eps")[i % 2])
           for i, (n, act, lay) in enumerate(itertools.product((2, 3, 4, 6, 8), ("bf16", "f16", "f32"), ("nc", "cn")))]
LARGE = [dict(n=n, act=act, layout=lay, C=64, M=70000, mode=mode)
         for (n, act, lay, mode) in [(4, "bf16", "nc", "log"), (4, "f32", "cn", "softmax_eps"),
                                     (8, "bf16", "cn", "log"), (8, "f16", "nc", "softmax_eps")]]


@pytest.mark.parametrize("cfg", CONFIGS + LARGE, ids=lambda c: "n{n}-{act}-{layout}-C{C}-M{M}-{mode}".format(**c))
@pytest.mark.parametrize("op,d", OPS, ids=lambda v: str(v))
def test_parity(op, d, cfg):
    extra = {}
    if op == "project":
        extra = dict(weight=cfg["C"] % 2 == 0, tf32=cfg["n"] == 3)
    if op == "expand_combine":
        extra = dict(bias=cfg["n"] in (2, 6))
    s = spec(op, d, cfg["n"], act=cfg["act"], layout=cfg["layout"], C=cfg["C"], mode=cfg["mode"], **extra)
    before = mhc._C.stats()
    check(s, cfg["M"], case_seed(op, d, tuple(cfg.values())))
    after = mhc._C.stats()
    # Both calls ran the generated kernel; none fell back.
    assert after["kernel_calls"] - before["kernel_calls"] == 2, (before, after)
    assert after["reference_calls"] == before["reference_calls"], (before, after)


WIDE_STREAM = [dict(act=act, C=C, M=M, bias=bias)
               for (act, C, M, bias) in [("bf16", 4096, 4096 + 3, False), ("f16", 2048, 7, True),
                                         ("bf16", 6144, 1, False)]]


@pytest.mark.parametrize("cfg", WIDE_STREAM, ids=lambda c: "{act}-C{C}-M{M}-bias{bias}".format(**c))
def test_expand_combine_forward_wide_stream_blocks(cfg):
    """n = 4's expand_combine forward on sm_90a, (C, n), C % 2048 == 0: blocks of
    512 threads x 2 items that hold whole tokens, evict-first stores. A
    ragged last block, a bias, a single token; against float64 MATH.md and
    run to run the same."""
    s = spec("expand_combine", "fwd", 4, act=cfg["act"], layout="cn", C=cfg["C"], bias=cfg["bias"])
    before = mhc._C.stats()
    check(s, cfg["M"], case_seed("wide", tuple(cfg.values())))
    after = mhc._C.stats()
    assert after["kernel_calls"] - before["kernel_calls"] == 2, (before, after)
    assert after["reference_calls"] == before["reference_calls"], (before, after)


TF32 = [dict(n=n, act=act, layout=lay, C=C, M=M)
        for (n, act, lay, C, M) in [(2, "bf16", "cn", 4096, 4096 + 5), (4, "bf16", "cn", 7168, 4096 + 3),
                                    (4, "f16", "nc", 1000, 7), (6, "bf16", "nc", 2048, 1),
                                    (8, "bf16", "cn", 7168, 2048 + 1), (8, "f16", "nc", 4096, 33),
                                    # wgmma on 64- and 32-column chunks (K % 128 = 64; K % 64 = 32)
                                    (8, "bf16", "nc", 1000, 300), (6, "bf16", "cn", 2064, 77),
                                    # n = 8 backward in one wave (no weight, K % 64 = 0): 2 and 4
                                    # boxes per block, a last odd 16-token step
                                    (8, "bf16", "nc", 2048, 77), (8, "bf16", "cn", 4096, 4096 + 63)]] + [
    # the warp-specialised wgmma backward where the columns do not fit one
    # wave of blocks (1152 boxes; 274 boxes: no divisor up to 8 gives
    # <= 132 blocks): 64-token steps, token shares past the last step empty
    dict(n=8, act="bf16", layout="nc", C=9216, M=300, weight=False),
    dict(n=8, act="bf16", layout="cn", C=2192, M=77, weight=False),
    # n = 6 without a weight: the one-wave backward (3 boxes per block; 1
    # box, the second consumer idle; 8 boxes), gphi^T in m64n48k16
    dict(n=6, act="bf16", layout="cn", C=4096, M=4096 + 17, weight=False),
    dict(n=6, act="bf16", layout="nc", C=1024, M=50, weight=False),
    dict(n=6, act="bf16", layout="cn", C=9216, M=77, weight=False),
    # n = 8 at 8 boxes per block (4 + 4, the ring down to 4 stages)
    dict(n=8, act="bf16", layout="nc", C=8192, M=1000 + 9, weight=False),
    # n = 4 without a weight: the backward's paced producer warp (two waves
    # of blocks at C = 7168); at M = 3 the same kernel unpaced, with empty
    # token shares
    dict(n=4, act="bf16", layout="nc", C=7168, M=8192 + 5, weight=False),
    dict(n=4, act="bf16", layout="cn", C=4096, M=3, weight=False)]


@pytest.mark.parametrize("cfg", TF32, ids=lambda c: "n{n}-{act}-{layout}-C{C}-M{M}".format(**c))
@pytest.mark.parametrize("d", ["fwd", "bwd"])
def test_projection_tf32_on_the_staged_paths(d, cfg):
    """The projection with the op's tf32 flag (bench/TE conventions) on the
    2-byte activation paths of every even n: the forward's bf16 parts of
    phi (n = 6, 8 on sm_90a: wgmma, with 128-, 64- and 32-column chunks)
    and the backward's block ring (n = 8 where K % 128 != 0: two k-tiles
    per warp, gh's padded rows) or, for n = 6 and 8 without a weight and
    K % 128 = 0 on sm_90a, its warp-specialised wgmma kernel (TMA tensor
    maps), and for n = 4 without a weight the ring's paced producer warp;
    token counts that end in a partial step."""
    s = spec("project", d, cfg["n"], act=cfg["act"], layout=cfg["layout"], C=cfg["C"], tf32=True,
             weight=cfg.get("weight", cfg["n"] in (4, 6)))
    before = mhc._C.stats()
    check(s, cfg["M"], case_seed("tf32", d, tuple(cfg.values())))
    after = mhc._C.stats()
    assert after["kernel_calls"] - before["kernel_calls"] == 2, (before, after)
    assert after["reference_calls"] == before["reference_calls"], (before, after)


@pytest.mark.parametrize("cfg", [dict(n=8, layout="cn", C=7168, M=2048 + 16 + 5, phi=2.0 ** -50),
                                 dict(n=6, layout="nc", C=4096, M=333, phi=2.0 ** 40)],
                         ids=lambda c: "n{n}-{layout}-C{C}-M{M}".format(**c))
def test_projection_backward_in_one_wave_scales_gh_per_token_and_phi_per_block(cfg):
    """The one-wave n = 6 / 8 backward (codegen/kernels/project/BackwardWide.cpp) multiplies
    D = gh phi^T in f16, gh scaled by a power of two per token and phi per
    block of columns. Token rows of gh (and gms) here span 2^-60 .. 2^60,
    gms follows phi's overall scale (so that D is not hidden under gms x),
    one is zero and one holds a NaN; phi is scaled far from 1 and by
    2^-8 .. 2^8 per 64 columns. Every token row of gx must match float64
    MATH.md relative to its own norm (the NaN row all NaN, the zero row
    zero), gphi (NaN in the NaN's row of gphi) relative to its norm."""
    s = spec("project", "bwd", cfg["n"], act="bf16", layout=cfg["layout"], C=cfg["C"], tf32=True)
    M, K = cfg["M"], cfg["n"] * cfg["C"]
    gen = torch.Generator(device="cuda").manual_seed(SEED + cfg["n"])
    t = make_inputs(s, M, gen)
    rows = torch.exp2(torch.randint(-60, 61, (M, 1), generator=gen, device="cuda").float())
    rows[5] = 0.0
    t["gh"] = t["gh"] * rows
    t["gms"] = t["gms"] * rows.reshape(t["gms"].shape) * cfg["phi"]  # D and gms x alike
    cols = torch.exp2(torch.randint(-8, 9, (1, K // 64, 1), generator=gen, device="cuda").float())
    t["phi"] = (t["phi"].reshape(-1, K // 64, 64) * cols * cfg["phi"]).reshape(t["phi"].shape)
    t["gh"][9, 3] = float("nan")
    before = mhc._C.stats()
    got = call(s, t)
    after = mhc._C.stats()
    assert after["kernel_calls"] - before["kernel_calls"] == 1 and after["reference_calls"] == before["reference_calls"]
    want = reference(s, t)
    gx, ref = got["gx"].reshape(M, K).double(), want["gx"].reshape(M, K)
    assert torch.isnan(gx[9]).all() and torch.isnan(ref[9]).all()
    assert (gx[5] == 0).all()
    keep = torch.ones(M, dtype=torch.bool, device="cuda")
    keep[5] = keep[9] = False
    err = ((gx - ref)[keep].norm(dim=1) / ref[keep].norm(dim=1)).max().item()
    RESULTS.append(("project.bwd", err, 1e-2, f"{s} M={M} gx per token row, scaled"))
    assert err <= 1e-2, f"gx: worst token row rel err {err:.3e}"
    gphi, refp = got["gphi"].double(), want["gphi"]
    assert torch.isnan(gphi[3]).all()
    ok = torch.ones(gphi.shape[0], dtype=torch.bool, device="cuda")
    ok[3] = False
    errp = ((gphi - refp)[ok].norm() / refp[ok].norm()).item()
    RESULTS.append(("project.bwd", errp, 2e-3, f"{s} M={M} gphi, scaled"))
    assert errp <= 2e-3, f"gphi: rel err {errp:.3e}"


RING = [dict(op=op, d="bwd", n=n, act=act, C=C, M=M, bias=bias, param=param)
        for (op, n, act, C, M, bias, param) in [
            ("expand_combine", 8, "bf16", 7168, 33, False, "f32"),     # 128-channel pieces, 7 per warp
            ("expand_combine", 8, "f16", 4096, 4096 + 3, True, "f32"),  # 4 per warp, f + bias, gbias
            ("expand_combine", 8, "bf16", 1056, 7, True, "bf16"),      # 32-channel pieces: 5 or 4 per warp
            ("expand_combine", 8, "bf16", 192, 300, False, "f32"),     # 64-channel pieces: warps 3-7 idle
            ("expand_combine", 8, "bf16", 32, 1, False, "f32"),        # one piece
            ("expand_combine", 4, "bf16", 7168, 65, False, "f32"),     # 256-channel pieces: 4 or 3 per warp
            ("expand_combine", 4, "f16", 2112, 4096 + 1, True, "bf16"),  # 64-channel pieces, a bias
            ("expand_combine", 4, "bf16", 96, 3, True, "f32"),         # 32-channel pieces
            ("aggregate", 8, "bf16", 7168, 4096 + 5, False, "f32"),
            ("aggregate", 8, "f16", 1056, 7, False, "f32"),
            ("aggregate", 4, "bf16", 4096, 33, False, "f32"),
            ("aggregate", 4, "bf16", 192, 1, False, "f32")]] + [
    # n = 8's expand_combine forward on the same rings
    dict(op="expand_combine", d="fwd", n=8, act=act, C=C, M=M, bias=bias, param=param)
    for (act, C, M, bias, param) in [("bf16", 7168, 33, False, "f32"), ("f16", 1056, 4096 + 7, True, "bf16"),
                                     ("bf16", 192, 1, True, "f32")]]


@pytest.mark.parametrize("cfg", RING, ids=lambda c: "{op}-{d}-n{n}-{act}-C{C}-M{M}-bias{bias}-{param}".format(**c))
def test_bulk_ring_kernels(cfg):
    """The aggregate and expand_combine backward for n = 4 and 8 and the
    n = 8 expand_combine forward, in the (C, n) layout on sm_90+: a block of
    eight warps per token, each fed by its own ring of bulk copies
    (TokenRing.cpp). Piece widths from 256 to 32 channels, warps with
    unequal or no pieces, a bias, against float64 MATH.md and run to run
    the same."""
    s = spec(cfg["op"], cfg["d"], cfg["n"], act=cfg["act"], layout="cn", C=cfg["C"], bias=cfg["bias"],
             param=cfg["param"])
    before = mhc._C.stats()
    check(s, cfg["M"], case_seed("ring", tuple(cfg.values())))
    after = mhc._C.stats()
    assert after["kernel_calls"] - before["kernel_calls"] == 2, (before, after)
    assert after["reference_calls"] == before["reference_calls"], (before, after)


ONE_BLOCK = [dict(n=4, act="bf16", layout="cn", C=4096, M=M, tf32=True, weight=False) for M in (1, 64, 65, 128, 129)] + [
    dict(n=4, act="bf16", layout="nc", C=7168, M=100, tf32=False, weight=True),
    dict(n=2, act="bf16", layout="cn", C=2048, M=64, tf32=True, weight=True),
    dict(n=6, act="bf16", layout="nc", C=1024, M=128, tf32=False, weight=True)]


@pytest.mark.parametrize("cfg", ONE_BLOCK, ids=lambda c: "n{n}-{layout}-C{C}-M{M}-tf32{tf32}-w{weight}".format(**c))
def test_projection_forward_within_one_token_block_splits_phi_in_place(cfg):
    """Up to one token block (M <= 128) the mma.sync forward's partial
    launch splits phi w into its bf16 parts itself and the pack launch is
    skipped; past it the pack runs. Up to half a token block the partial's
    copy whose warps without a token skip their products runs instead of the
    plain one. Against float64 MATH.md, and the launches that ran as the
    manifest's min_tokens and max_tokens say."""
    s = spec("project", "fwd", cfg["n"], act=cfg["act"], layout=cfg["layout"], C=cfg["C"], tf32=cfg["tf32"],
             weight=cfg["weight"])
    check(s, cfg["M"], case_seed("one-block", tuple(cfg.values())))
    gen = torch.Generator(device="cuda").manual_seed(SEED)
    t = make_inputs(s, cfg["M"], gen)
    call(s, t)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        call(s, t)
        torch.cuda.synchronize()
    names = [e.name for e in prof.events() if e.name.startswith("mhc_project_fwd")]
    assert any(k.endswith("_partial_few") for k in names) == (cfg["M"] <= 64), names
    assert any(k.endswith("_partial") for k in names) == (cfg["M"] > 64), names
    assert any(k.endswith("_pack") for k in names) == (cfg["M"] > 128), names


@pytest.mark.parametrize("d", ["fwd", "bwd"])
@pytest.mark.parametrize("n", [4, 8])
def test_sinkhorn_log_mode_wide_logits_take_the_log_domain(n, d):
    """The log mode runs in the scaling form u = 1/(K v), v = 1/(K^T u) and
    redoes a token in the log domain when a sum leaves [2^-100, 2^100]. Here
    every other token has a first column of logits near -75 (its K entries
    are ~2^-108, its sum below 2^-100): those tokens take the log domain,
    the others the scaling form, and all must match float64 MATH.md."""
    s = spec("sinkhorn", d, n, mode="log")

    def widen(t, gen):
        L = t["logits"]
        L[::2, :, 0] = -75.0 + torch.rand(L[::2, :, 0].shape, generator=gen, device=L.device)

    before = mhc._C.stats()
    check(s, 4096, SEED + 17 * n + (d == "bwd"), adjust=widen)
    after = mhc._C.stats()
    assert after["kernel_calls"] - before["kernel_calls"] == 2, (before, after)
    assert after["reference_calls"] == before["reference_calls"], (before, after)


PRE_CASES = [
    # The bench's conventions (TE: norm_eps = FLT_EPSILON, pre_eps = 0, log, TF32).
    dict(n=4, act="bf16", layout="cn", C=4096, M=128, mode="log", tf32=True, weight=False, norm_eps=1.1920929e-07,
         pre_eps=0.0),
    dict(n=4, act="bf16", layout="nc", C=7168, M=77, mode="softmax_eps", tf32=False, weight=True),
    dict(n=4, act="bf16", layout="nc", C=2048, M=33, mode="log", tf32=True, weight=True, param="bf16"),
    dict(n=8, act="bf16", layout="cn", C=2048, M=300, mode="log", tf32=True, weight=False),
    # n >= 6 past 512 tokens: the four kernels (the same bits).
    dict(n=8, act="bf16", layout="nc", C=1024, M=1000, mode="softmax_eps", tf32=True, weight=False),
    dict(n=6, act="f16", layout="nc", C=1000, M=5, mode="softmax_eps", tf32=False, weight=True),
    dict(n=3, act="f32", layout="cn", C=64, M=70000, mode="log", tf32=False, weight=False),
    dict(n=2, act="bf16", layout="nc", C=4096, M=1, mode="softmax_eps", tf32=True, weight=False),
]


def pre_inputs(cfg, gen):
    p = spec("project", "fwd", cfg["n"], act=cfg["act"], layout=cfg["layout"], C=cfg["C"], mode=cfg["mode"],
             tf32=cfg["tf32"], weight=cfg["weight"], param=cfg.get("param", "f32"))
    for k in ("norm_eps", "pre_eps"):
        p[k] = cfg.get(k, p[k])
    t = make_inputs(p, cfg["M"], gen)
    t.update({k: make_inputs(dict(p, op="scale"), 1, gen)[k] for k in ("alpha", "beta")})
    return p, t


@pytest.mark.parametrize("cfg", PRE_CASES, ids=lambda c: "n{n}-{act}-{layout}-C{C}-M{M}-{mode}".format(**c))
def test_pre_fused_matches_float64_and_the_four_ops(cfg):
    """torch.ops.mhc.pre runs one fused kernel (pack/partial + a tail per
    token; up to the one-launch threshold the one-launch kernel): each stage
    against float64 MATH.md on the kernel's own inputs to that stage (the
    bounds of that op), and bit for bit what the four separate ops give
    (within SPEC.md's bounds of them for the one-launch kernel), run to run the same, with and without the saved
    intermediates; its gradient (the four backward kernels) bit for bit the
    separate ops' graph."""
    gen = torch.Generator(device="cuda").manual_seed(SEED + cfg["M"] + 31 * cfg["n"])
    s, t = pre_inputs(cfg, gen)
    n, lay, o = s["n"], s["layout"], torch.ops.mhc
    eps = s["eps"] if s["mode"] == "softmax_eps" else 0.0
    args = (t["x"], t["phi"], t["alpha"], t["beta"], t.get("weight"), n, lay, s["tf32"], s["norm_eps"],
            s["pre_eps"], s["post_mult"], s["mode"], s["iters"], eps)
    before = mhc._C.stats()
    saved = o.pre_saved(*args)
    plain = o.pre(*args)
    again = o.pre(*args)
    after = mhc._C.stats()
    one_kernel = cfg["n"] <= 4 or cfg["M"] <= 512
    assert after["kernel_calls"] - before["kernel_calls"] == (3 if one_kernel else 12), (before, after)
    assert after["reference_calls"] == before["reference_calls"], (before, after)
    y, post, P, h, ms, pre, logits = saved
    for a, b, c in zip(saved[:3], plain, again):
        assert torch.equal(a, b) and torch.equal(b, c)
    # Stage by stage against float64, each on the fused kernel's own inputs.
    stages = [
        (s, dict(x=t["x"], phi=t["phi"], **({"weight": t["weight"]} if "weight" in t else {})),
         {"h": h, "ms": ms}),
        (dict(s, op="scale"), dict(h=h, ms=ms, alpha=t["alpha"], beta=t["beta"]),
         {"pre": pre, "post": post, "logits": logits}),
        (dict(s, op="sinkhorn", eps=eps), dict(logits=logits), {"P": P}),
        (dict(s, op="aggregate"), dict(x=t["x"], pre=pre), {"y": y}),
    ]
    for st, inp, got in stages:
        want = reference(st, inp)
        for k, g in got.items():
            r = want[k].detach().reshape(-1)
            err = ((g.reshape(-1).double() - r).norm() / r.norm().clamp_min(1e-300)).item()
            b = bound(st, g.dtype)
            RESULTS.append((f"pre.fwd ({st['op']})", err, b, f"{cfg} {k}"))
            assert torch.isfinite(g).all() and err <= b, f"pre {k}: rel err {err:.3e} > {b:.0e} ({cfg})"
    # The four separate ops: the same bits.
    h4, ms4 = o.project(t["x"], t["phi"], t.get("weight"), n, lay, s["tf32"])
    pre4, post4, logits4 = o.scale(h4, ms4, t["alpha"], t["beta"], n, s["norm_eps"], s["pre_eps"], s["post_mult"])
    P4 = o.sinkhorn(logits4, n, s["mode"], s["iters"], eps)
    y4 = o.aggregate(t["x"], pre4, n, lay)
    # Up to the one-launch threshold the fused pre step is the one-launch
    # kernel, whose projection sums in another order (docs/design/serve.md):
    # there the separate ops' results are within SPEC.md's bounds of its
    # (both are within them of float64), past it bit for bit.
    one_launch = mhc._C.forward_runs_in_one_launch(cfg["M"])
    # Twice SPEC.md's bound: the activations' for y (and the gradients), TF32's
    # for what follows h where the spec has tf32, f32's for the rest.
    close = 2e-2 if cfg["act"] != "f32" else 4e-3 if cfg["tf32"] else 2e-5
    mixing = 4e-3 if cfg["tf32"] else 2e-5
    near = dict(y=close, ms=2e-5, post=mixing, P=mixing, h=mixing, pre=mixing, logits=mixing)
    for name, a, b in zip(("y", "post", "P", "h", "ms", "pre", "logits"), saved, (y4, post4, P4, h4, ms4, pre4,
                                                                                   logits4)):
        if one_launch:
            err = ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-300)).item()
            RESULTS.append(("pre one-launch vs the four ops", err, near[name], f"{cfg} {name}"))
            assert err <= near[name], f"pre {name}: {err:.3e} > {near[name]:.0e} from the separate ops ({cfg})"
        else:
            assert torch.equal(a, b), f"pre {name} differs from the separate ops ({cfg})"
    # Gradients: autograd of pre (saved intermediates, four backward
    # kernels) against autograd of the separate ops.
    if cfg["M"] > 4096:
        return
    leaves = {k: v.detach().requires_grad_() for k, v in t.items() if k in ("x", "phi", "alpha", "beta", "weight")}
    L = lambda k: leaves.get(k)  # noqa: E731
    fused = o.pre(L("x"), L("phi"), L("alpha"), L("beta"), L("weight"), *args[5:])
    h4, ms4 = o.project(L("x"), L("phi"), L("weight"), n, lay, s["tf32"])
    pre4, post4, logits4 = o.scale(h4, ms4, L("alpha"), L("beta"), n, s["norm_eps"], s["pre_eps"], s["post_mult"])
    sep = (o.aggregate(L("x"), pre4, n, lay), post4, o.sinkhorn(logits4, n, s["mode"], s["iters"], eps))
    g = [torch.randn(v.shape, generator=gen, device="cuda").to(v.dtype) for v in fused]
    wrt = list(leaves.values())
    for name, a, b in zip(leaves, torch.autograd.grad(fused, wrt, g), torch.autograd.grad(sep, wrt, g)):
        if one_launch:  # (the saved h, ms, pre, logits differ by rounding)
            err = ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-300)).item()
            RESULTS.append(("pre one-launch grad vs the four ops", err, close, f"{cfg} {name}"))
            assert err <= close, f"pre: grad of {name}: {err:.3e} > {close:.0e} from the separate ops' ({cfg})"
        else:
            assert torch.equal(a, b), f"pre: grad of {name} differs from the separate ops' ({cfg})"


def test_pre_with_mixed_parameter_dtypes_runs_the_four_kernels():
    """phi f32 with bf16 alpha/beta: no single fused spec; the four ops run."""
    gen = torch.Generator(device="cuda").manual_seed(SEED)
    s, t = pre_inputs(dict(n=4, act="bf16", layout="nc", C=512, M=40, mode="log", tf32=False, weight=False), gen)
    alpha, beta = t["alpha"].bfloat16(), t["beta"].bfloat16()
    args = (4, "nc", False, 1e-6, 1e-6, 2.0, "log", 20, 0.0)
    before = mhc._C.stats()
    y, post, P = torch.ops.mhc.pre(t["x"], t["phi"], alpha, beta, None, *args)
    after = mhc._C.stats()
    assert after["kernel_calls"] - before["kernel_calls"] == 4 and after["reference_calls"] == before["reference_calls"]
    h, ms = torch.ops.mhc.project(t["x"], t["phi"], None, 4, "nc", False)
    pre, post4, logits = torch.ops.mhc.scale(h, ms, alpha, beta, 4, 1e-6, 1e-6, 2.0)
    assert torch.equal(y, torch.ops.mhc.aggregate(t["x"], pre, 4, "nc")) and torch.equal(post, post4)
    assert torch.equal(P, torch.ops.mhc.sinkhorn(logits, 4, "log", 20, 0.0))



def test_whole_layer_matches_float64_and_is_deterministic():
    """pre + block + post, forward and backward, against autograd of float64 MATH.md."""
    from mhc import reference as ref
    torch.manual_seed(SEED)
    M, n, C = 512, 4, 2048
    hc = mhc.HyperConnection(n, C, bias=True).cuda()
    with torch.no_grad():
        hc.alpha.copy_(torch.rand(3) + 0.5)
        hc.beta.normal_(0, 0.5)
        hc.bias.normal_()
    block = torch.nn.Linear(C, C).cuda().to(torch.bfloat16)
    x = torch.randn(M, n, C, device="cuda").to(torch.bfloat16).requires_grad_()

    def run():
        x.grad = None
        for p in hc.parameters():
            p.grad = None
        out = hc(x, block)
        out.float().pow(2).sum().backward()
        return out.detach(), x.grad.clone(), hc.phi.grad.clone()

    before = mhc._C.stats()
    out1, gx1, gphi1 = run()
    out2, gx2, gphi2 = run()
    after = mhc._C.stats()
    assert after["reference_calls"] == before["reference_calls"]
    # Per run: the fused pre step (1), expand_combine (1), the five backwards.
    assert after["kernel_calls"] - before["kernel_calls"] == 14
    assert torch.equal(out1, out2) and torch.equal(gx1, gx2) and torch.equal(gphi1, gphi2)
    # float64 reference of the same layer (the bf16 block output taken as given).
    x64 = x.detach().double().requires_grad_()
    p64 = {k: v.detach().double().requires_grad_() for k, v in dict(hc.named_parameters()).items()}
    h, ms = ref.project(x64, p64["phi"], p64["norm_weight"])
    pre, post, L = ref.scale(h, ms, p64["alpha"], p64["beta"], n)
    P = ref.sinkhorn(L, "softmax_eps", 20, 1e-6)
    y = ref.aggregate(x64, pre)
    f = block(y.to(torch.bfloat16)).double()
    out64 = ref.expand_combine(f, post, x64, P, p64["bias"])
    assert ((out1.double() - out64).norm() / out64.norm()).item() <= 1e-2


def test_jit_compiles_once_then_hits_the_disk_cache(tmp_path):
    script = textwrap.dedent("""
        import torch, mhc
        x = torch.randn(7, 4, 320, device="cuda", dtype=torch.bfloat16)
        y = mhc.aggregate(x, torch.rand(7, 4, device="cuda"))
        torch.cuda.synchronize()
        print("ok", tuple(y.shape))
    """)
    env = dict(os.environ, MHC_CACHE_DIR=str(tmp_path / "cache"), MHC_LOG="1")
    first = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    second = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert "[mhc] compiled mhc_aggregate_fwd_n4_" in first.stderr, first.stderr
    assert "[mhc] disk cache hit mhc_aggregate_fwd_n4_" in second.stderr, second.stderr
    assert "[mhc] compiled" not in second.stderr
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "jit-cache.log"), "w") as f:
            f.write("first process:\n" + first.stderr + "second process:\n" + second.stderr)


def _expect_fallback(fn, reason):
    before = mhc._C.stats()["reference_calls"]
    with pytest.warns(UserWarning, match=reason):
        out = fn()
    assert mhc._C.stats()["reference_calls"] == before + 1
    return out


def test_fallbacks_warn_and_match_the_reference():
    n = 9
    x = torch.randn(5, n, 64, device="cuda")
    pre = torch.rand(5, n, device="cuda")
    y = _expect_fallback(lambda: torch.ops.mhc.aggregate(x, pre, n, "nc"), "n = 9 is outside the specialised range")
    assert torch.allclose(y, torch.einsum("mi,mic->mc", pre, x), atol=1e-5)
    x4 = torch.randn(5, 64, 4, device="cuda").transpose(1, 2)  # non-contiguous [M, n, C]
    y4 = _expect_fallback(lambda: torch.ops.mhc.aggregate(x4, torch.rand(5, 4, device="cuda"), 4, "nc"),
                          "non-contiguous")
    assert y4.shape == (5, 64)
    xd = torch.randn(5, 4, 64, device="cuda", dtype=torch.float64)
    _expect_fallback(lambda: torch.ops.mhc.aggregate(xd, torch.rand(5, 4, device="cuda", dtype=torch.float64), 4,
                                                     "nc"), "Double")
    env = dict(os.environ, MHC_FORCE_REFERENCE="1")
    r = subprocess.run([sys.executable, "-c", "import torch, mhc; "
                        "mhc.sinkhorn(torch.randn(3, 4, 4, device='cuda')); torch.cuda.synchronize()"],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "MHC_FORCE_REFERENCE=1" in r.stderr, r.stderr


def test_bad_inputs_on_gpu():
    x = torch.randn(5, 4, 64, device="cuda")
    with pytest.raises(ValueError, match=r"argument 'pre' is on cpu but the other tensors are on cuda"):
        torch.ops.mhc.aggregate(x, torch.rand(5, 4), 4, "nc")
    with pytest.raises(TypeError, match=r"argument 'post' must be a float32 tensor"):
        torch.ops.mhc.expand_combine(torch.randn(5, 64, device="cuda"), torch.rand(5, 4, device="cuda").half(), x,
                                     torch.rand(5, 4, 4, device="cuda"), None, 4, "nc")
    dev = dict(device="cuda")
    # Messages with numbers in them (these crashed the process on the GPU
    # machine while they were formatted through std::ostream).
    with pytest.raises(ValueError, match=r"argument 'pre' must have shape \[M, n\] = \[5, 4\] \(n = 4\); got shape \[5, 3\]"):
        torch.ops.mhc.aggregate(x, torch.rand(5, 3, **dev), 4, "nc")
    with pytest.raises(ValueError, match=r"iters must be >= 1; got 0"):
        torch.ops.mhc.sinkhorn(torch.randn(5, 4, 4, **dev), 4, "log", 0, 0.0)
    with pytest.raises(ValueError, match=r"eps must be >= 0; got -0.5"):
        torch.ops.mhc.sinkhorn(torch.randn(5, 4, 4, **dev), 4, "softmax_eps", 20, -0.5)
    args = (torch.rand(3, **dev), torch.zeros(24, **dev))
    with pytest.raises(ValueError, match=r"argument 'phi' must have shape \[N, K\] = \[2n \+ n\^2, n\*C\] = \[24, 256\]"):
        torch.ops.mhc.pre(x.bfloat16(), torch.randn(24, 64, **dev), *args, None, 4, "nc", True, 1e-6, 0.0, 2.0,
                          "log", 20, 0.0)
    with pytest.raises(ValueError, match=r"mode must be 'log' or 'softmax_eps'"):
        torch.ops.mhc.pre(x.bfloat16(), torch.randn(24, 256, **dev), *args, None, 4, "nc", True, 1e-6, 0.0, 2.0,
                          "exact", 20, 0.0)


def _model(n=4, C=256):
    torch.manual_seed(1)
    hc1 = mhc.HyperConnection(n, C, mode="log").cuda()
    hc2 = mhc.HyperConnection(n, C, mode="softmax_eps", bias=True).cuda()
    block = torch.nn.Sequential(torch.nn.Linear(C, C), torch.nn.GELU()).cuda()

    def model(x):
        return hc2(hc1(x, block), block)
    return model


def test_torch_compile_fullgraph_matches_eager():
    torch._dynamo.reset()
    model = _model()
    x = torch.randn(64, 4, 256, device="cuda")
    eager = model(x)
    compiled = torch.compile(model, fullgraph=True)(x)
    assert torch.allclose(compiled, eager, rtol=1e-5, atol=1e-5)
    xc = x.clone().requires_grad_()
    torch.compile(model, fullgraph=True)(xc).sum().backward()
    xe = x.clone().requires_grad_()
    model(xe).sum().backward()
    assert torch.allclose(xc.grad, xe.grad, rtol=1e-4, atol=1e-5)


def test_cuda_graph_replay_matches_eager():
    model = _model()
    static_x = torch.randn(64, 4, 256, device="cuda")
    eager = model(static_x).clone()  # also warms up (compiles) every kernel
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        model(static_x)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        static_out = model(static_x)
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(static_out, eager)
    static_x.copy_(torch.randn_like(static_x))
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(static_out, model(static_x))


def _cuda_samples():
    M, n, C = 7, 4, 64
    dev = dict(device="cuda")
    N, K = 2 * n + n * n, n * C
    x = torch.randn(M, n, C, dtype=torch.bfloat16, **dev)
    phi, w = torch.randn(N, K, **dev) / 16, 1 + 0.1 * torch.randn(K, **dev)
    h, ms = torch.randn(M, N, **dev), torch.rand(M, **dev) + 0.5
    alpha, beta = torch.rand(3, **dev), torch.randn(N, **dev)
    L, pre, post = torch.randn(M, n, n, **dev), torch.rand(M, n, **dev), torch.rand(M, n, **dev)
    P = torch.softmax(torch.randn(M, n, n, **dev), -1)
    f, bias = torch.randn(M, C, dtype=torch.bfloat16, **dev), torch.randn(C, **dev)
    return {
        "project": (x, phi, w, n, "nc", False),
        "project_backward": (h, ms, x, phi, w, n, "nc", False),
        "scale": (h, ms, alpha, beta, n, 1e-6, 1e-6, 2.0),
        "scale_backward": (pre, post, L, h, ms, alpha, beta, n, 1e-6, 0.0, 2.0),
        "sinkhorn": (L, n, "log", 20, 0.0),
        "sinkhorn_backward": (torch.randn(M, n, n, **dev), L, n, "softmax_eps", 20, 1e-6),
        "aggregate": (x, pre, n, "nc"),
        "aggregate_backward": (f, x, pre, n, "nc"),
        "expand_combine": (f, post, x, P, bias, n, "nc"),
        "expand_combine_backward": (x, f, post, x, P, bias, n, "nc"),
        "pre": (x, phi, alpha, beta, w, n, "nc", False, 1e-6, 1e-6, 2.0, "log", 20, 0.0),
        "pre_saved": (x, phi, alpha, beta, w, n, "nc", False, 1e-6, 1e-6, 2.0, "log", 20, 0.0),
    }


@pytest.mark.parametrize("op", sorted(_cuda_samples()))
def test_opcheck_cuda(op):
    args = _cuda_samples()[op]
    if not op.endswith("backward"):
        args = tuple(a.requires_grad_() if isinstance(a, torch.Tensor) and a.is_floating_point() else a
                     for a in args)
    before = mhc._C.stats()["reference_calls"]
    torch.library.opcheck(getattr(torch.ops.mhc, op), args)
    assert mhc._C.stats()["reference_calls"] == before  # opcheck ran the kernels


def test_zz_summary():
    """Prints the worst error per op against its bound (last test)."""
    worst = {}
    for name, err, b, where in RESULTS:
        if name not in worst or err / b > worst[name][0] / worst[name][1]:
            worst[name] = (err, b, where)
    lines = [f"device: {torch.cuda.get_device_name()}  seed: {SEED}  checks: {len(RESULTS)}"]
    for name in sorted(worst):
        err, b, where = worst[name]
        lines.append(f"  {name:20s} worst rel err {err:.3e}  bound {b:.0e}  ({where})")
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "torch-suite-summary.txt"), "w") as f:
            f.write("\n".join(lines) + "\n")
        with open(os.path.join(out, "torch-suite-results.json"), "w") as f:
            json.dump(RESULTS, f)
    print("\n".join(lines))
