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
import json
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


def check_backward_with_acc(s, M, seed, acc_mode, cfg, acc_added_to_rounded):
    """project_backward with acc in x's dtype ("x") or f32: two calls give
    the same bits, generated kernels only, gphi as without acc, gx within
    the bound of float64 gx + acc. gx is bitwise the unfused gx plus acc
    where the kernel adds acc to its gx rounded (acc in x's dtype, or every
    mode with acc_added_to_rounded: launch "acc")."""
    n, lay = s["n"], s["layout"]
    gen = torch.Generator(device="cuda").manual_seed(seed)
    t = make_inputs(s, M, gen)
    dtype = torch.float32 if acc_mode == "f32" else torch.bfloat16
    acc = torch.randn(t["x"].shape, generator=gen, device="cuda").to(dtype)
    o = torch.ops.mhc
    args = (t["gh"], t["gms"], t["x"], t["phi"], t.get("weight"), n, lay, s["tf32"])
    before = mhc._C.stats()
    fused, again, unfused = o.project_backward(*args, acc), o.project_backward(*args, acc), o.project_backward(*args)
    torch.cuda.synchronize()
    after = mhc._C.stats()
    where = f"({cfg}, seed {seed})"
    assert after["reference_calls"] == before["reference_calls"], (before, after, where)
    assert after["kernel_calls"] - before["kernel_calls"] == 3, (before, after, where)
    for a, b in zip(fused, again):
        assert torch.equal(a, b), f"two runs differ {where}"
    gx = fused[0]
    assert gx.dtype == torch.bfloat16 and gx.shape == t["x"].shape
    if acc_added_to_rounded or acc_mode == "x":
        assert torch.equal(gx, unfused[0].to(dtype).add(acc).to(torch.bfloat16)), f"gx is not own + acc {where}"
    assert torch.equal(fused[1], unfused[1]), f"gphi changed with acc {where}"
    want = reference(s, t)["gx"].detach().reshape(-1) + acc.reshape(-1).double()
    got = gx.reshape(-1).double()
    err = ((got - want).norm() / want.norm().clamp_min(1e-300)).item()
    assert torch.isfinite(got).all() and err <= bound(s, gx.dtype), f"gx: rel err {err:.3e} {where}"


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
# 4099, f16 and bf16, weight or not (paced or not). (On sm_90a n = 6 in
# bf16 without a weight runs the one-wave kernel in pieces: WIDE_PIECES.)
RING_ROWS = [dict(n=n, C=C, act=act, layout="cn", tf32=True, weight=w, M=M)
             for (n, C), act, w, M in itertools.product(
                 ((2, 4098), (4, 5129), (6, 4098)), ("bf16", "f16"), (False, True), (1, 2, 9, 4099))]


# The same ring at 4-byte rows (K % 8 = 2, 6: shifts of 0, 4, 8 or 12 bytes,
# x read back in 4-byte pieces): n = 2 and 6 at odd C, M = 1, 2, 3, 5
# (rows past M of every shift), 4099.
RING_ROWS += [dict(n=n, C=C, act=act, layout="cn", tf32=True, weight=w, M=M)
              for (n, C), act, w, M in itertools.product(
                  ((2, 5121), (2, 5123), (6, 5127)), ("bf16", "f16"), (False, True), (1, 2, 3, 5, 4099))]


@pytest.mark.parametrize("cfg", RING_ROWS, ids=lambda c: "n{n}-C{C}-{act}-w{weight:d}-M{M}".format(**c))
def test_block_ring_at_k_mod_8_eq_4(cfg):
    s = spec("project", "bwd", cfg["n"], cfg["act"], cfg["layout"], cfg["C"], tf32=cfg["tf32"], weight=cfg["weight"])
    check_on_kernel_path(s, cfg["M"], case_seed("ring", tuple(cfg.values())))


# The block ring at 8-byte rows runs its step loop unmasked in the slices
# inside K and masked in the last (two loops; one with a weight and acc):
# acc (x's dtype: added to gx rounded, so bitwise the unfused gx + acc; or
# TE's f32 buffer, added before the rounding) at M = 2, 9 (a partial step)
# and 4099, in both loops.
RING_ACC = [dict(n=n, C=C, weight=w, M=M, acc=acc)
            for (n, C, w), M, acc in itertools.product(((4, 5129, False), (2, 4098, False), (4, 7167, True)),
                                                        (2, 9, 4099), ("x", "f32"))]


@pytest.mark.parametrize("cfg", RING_ACC, ids=lambda c: "n{n}-C{C}-w{weight:d}-M{M}-acc_{acc}".format(**c))
def test_block_ring_with_acc(cfg):
    s = spec("project", "bwd", cfg["n"], "bf16", "cn", cfg["C"], tf32=True, weight=cfg["weight"])
    check_backward_with_acc(s, cfg["M"], case_seed("ring-acc", tuple(cfg.values())), cfg["acc"], cfg,
                            acc_added_to_rounded=False)


# The per-warp ring at 2-byte rows (odd K: n and C odd): x as the aligned
# words around a lane's columns, funnel-shifted by the row's half-word; rows
# past M and words past a row's end zero-filled. n = 1, 3, 5, 7 (laneCols 8,
# 4, 2), bf16 and f16, tf32 and precise, weight or not, M = 1, 2, 9, 4099;
# the bf16 cases also with acc (in x's dtype or TE's f32 buffer; the acc
# helper is bf16's). C = 33 at n = 1: K = 33.
WORDS_2B = [dict(n=n, C=C, act=("bf16", "f16")[i % 2], tf32=bool((i // 2) % 2), weight=bool(i % 3 == 0), M=M,
                 acc=("x", "f32")[(i // 3) % 2])
            for i, ((n, C), M) in enumerate(itertools.product(((1, 5121), (1, 33), (3, 5127), (5, 5121), (7, 5121)),
                                                            (1, 2, 9, 4099)))]
assert all((c["n"] * c["C"]) % 2 for c in WORDS_2B)


@pytest.mark.parametrize("cfg", WORDS_2B, ids=lambda c: "n{n}-C{C}-{act}-tf32{tf32:d}-w{weight:d}-M{M}-acc_{acc}".format(**c))
def test_backward_at_2_byte_rows(cfg):
    check_per_warp_ring(cfg, "words")


def check_per_warp_ring(cfg, key):
    """The backward on the kernel path, and for bf16 with acc too."""
    s = spec("project", "bwd", cfg["n"], cfg["act"], "cn", cfg["C"], tf32=cfg["tf32"], weight=cfg["weight"])
    seed = case_seed(key, tuple(cfg.values()))
    check_on_kernel_path(s, cfg["M"], seed)
    if cfg["act"] == "bf16":
        check_backward_with_acc(s, cfg["M"], seed, cfg["acc"], cfg, acc_added_to_rounded=False)


# The per-warp ring's row words (laneCols 8: n = 1, 3 in tf32, n = 1
# precise; 4-byte rows, and odd K without acc: tf32, n = 1 precise without
# a weight): a warp copies each of a step's 8 rows as consecutive words,
# lane j word j. Rows past M (M = 1, 7, 9: partial steps) and words past a
# row's end or past K's last warp (C = 34 at n = 3: K = 102; C = 66 at n =
# 1) zero-filled. C = 11 at n = 3 (K = 33, odd) takes row words without
# acc, the lane slots with it.
ROW_WORDS = [dict(n=n, C=C, act=("bf16", "f16")[i % 2], tf32=bool((i // 2) % 2) or n == 3, weight=bool(i % 3 == 0),
                  M=M, acc=("x", "f32")[(i // 3) % 2])
             for i, ((n, C), M) in enumerate(itertools.product(((1, 5122), (1, 4102), (3, 5122), (3, 34), (1, 66),
                                                               (3, 11)), (1, 7, 9, 4099)))]
assert all((c["n"] * c["C"]) % 4 != 0 for c in ROW_WORDS)


@pytest.mark.parametrize("cfg", ROW_WORDS, ids=lambda c: "n{n}-C{C}-{act}-tf32{tf32:d}-w{weight:d}-M{M}-acc_{acc}".format(**c))
def test_backward_row_words(cfg):
    check_per_warp_ring(cfg, "row-words")


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


# The staged forward where x's rows are 4-byte aligned (K % 8 = 2 or 6:
# n = 2, 6, 7 at odd C, n = 1 and 3 at C = 2 mod 4): the last chunk masked
# at K; the others at n <= 3 as the two aligned granules around them shifted
# by the row's offset (realignX, not at M = 1: partial_few), on wgmma (n = 6,
# 7 tf32) by the rows' parity, else in four 4-byte loads per lane and pair.
# C = 11 at n = 6: K = 66, one 64-column chunk and 2 columns; n = 2, C = 17,
# n = 1, C = 34 and n = 3, C = 14: one shifted 32-column chunk and the masked
# one.
STAGED_4B = [dict(n=n, C=C, act="bf16", layout=("cn", "nc")[i % 2], tf32=bool((i // 2) % 2), weight=bool(i % 3 == 0),
                  M=(1, 77, 4099, 130)[i % 4])
             for i, (n, C) in enumerate([(6, 5127), (6, 5121), (6, 5127), (6, 5121), (2, 5121), (2, 5123), (6, 11),
                                         (6, 11), (1, 5122), (3, 5126), (2, 17), (3, 14), (1, 5126), (3, 5122),
                                         (1, 34), (3, 14), (7, 5122), (7, 10), (7, 5122), (7, 10)])]
assert all((c["n"] * c["C"]) % 8 in (2, 6) for c in STAGED_4B)


@pytest.mark.parametrize("cfg", STAGED_4B, ids=lambda c: "n{n}-C{C}-{layout}-tf32{tf32:d}-w{weight:d}-M{M}".format(**c))
def test_staged_forward_at_4_byte_rows(cfg):
    s = spec("project", "fwd", cfg["n"], "bf16", cfg["layout"], cfg["C"], tf32=cfg["tf32"], weight=cfg["weight"])
    check_on_kernel_path(s, cfg["M"], case_seed("staged4", tuple(cfg.values())))


# The staged forward at 2-byte rows (odd K: n and C odd): the last chunk
# masked at K element by element; the others as the five aligned words
# around a lane's 16 bytes, funnel-shifted by a half-word at odd tokens
# (halfRows), on wgmma (n = 7 tf32) by the rows' parity (at M = 1 the odd
# rows read token 0 from its second element). K = 33, 35, 63: one 32-column
# chunk and the masked one.
STAGED_2B = [dict(n=n, C=C, act="bf16", layout=("cn", "nc")[i % 2], tf32=bool((i // 2) % 2), weight=bool(i % 3 == 0),
                  M=(1, 77, 4099, 130, 2, 3)[i % 6])
             for i, (n, C) in enumerate([(1, 5121), (3, 5127), (5, 5121), (7, 5121), (1, 33), (3, 11), (5, 7),
                                         (7, 9), (1, 5127), (3, 5121), (5, 5127), (7, 5127), (7, 7167), (3, 7167)])]
STAGED_2B += [dict(n=7, C=C, act="bf16", layout="cn", tf32=True, weight=w, M=M)
              for (C, w), M in itertools.product(((9, False), (5121, True)), (1, 2, 3, 64, 129))]
assert all((c["n"] * c["C"]) % 2 for c in STAGED_2B)


@pytest.mark.parametrize("cfg", STAGED_2B, ids=lambda c: "n{n}-C{C}-{layout}-tf32{tf32:d}-w{weight:d}-M{M}".format(**c))
def test_staged_forward_at_2_byte_rows(cfg):
    s = spec("project", "fwd", cfg["n"], "bf16", cfg["layout"], cfg["C"], tf32=cfg["tf32"], weight=cfg["weight"])
    check_on_kernel_path(s, cfg["M"], case_seed("staged2", tuple(cfg.values())))


# The wgmma plans at 4- and 8-byte rows (tf32, n = 6 and 7) take each
# m-tile's even tokens as rows g and its odd ones as rows g + 8
# (parityRows); a row past M loads the last token of its parity, or at M = 1
# (no odd token) token 0 from its third (4-byte rows) or fifth (8-byte rows)
# element. M across those cases and the 64-token m-tiles; C = 34 at n = 6
# and C = 36 at n = 7: one 128-column chunk by parity and the masked one.
PARITY = [dict(n=n, C=C, act="bf16", layout=("cn", "nc")[i % 2], tf32=True, weight=bool(i % 3 == 0), M=M)
          for i, ((n, C), M) in enumerate(itertools.product([(6, 11), (7, 10), (6, 5127), (6, 34), (7, 36), (6, 5126)],
                                                            (1, 2, 3, 64, 129)))]
assert all((c["n"] * c["C"]) % 8 in (2, 4, 6) for c in PARITY)


@pytest.mark.parametrize("cfg", PARITY, ids=lambda c: "n{n}-C{C}-{layout}-w{weight:d}-M{M}".format(**c))
def test_staged_forward_rows_by_parity(cfg):
    s = spec("project", "fwd", cfg["n"], "bf16", cfg["layout"], cfg["C"], tf32=cfg["tf32"], weight=cfg["weight"])
    check_on_kernel_path(s, cfg["M"], case_seed("parity", tuple(cfg.values())))


# K % 8 == 0 with no 32-column chunk dividing K (n = 6, C = 5124: K % 32 =
# 24): the staged forward's masked last chunk in 16-byte pieces (the
# ForwardTf32 kernel before, at half the aligned C's speed).
STAGED_K32 = [dict(n=n, C=C, act="bf16", layout=("cn", "nc")[i % 2], tf32=bool((i // 2) % 2), weight=bool(i % 3 == 0),
                   M=(1, 77, 4099, 130)[i % 4])
              for i, (n, C) in enumerate([(4, 5124), (6, 5124), (6, 3000), (8, 5121), (8, 33), (5, 2192), (6, 5124),
                                          (8, 5121)])]
assert all((c["n"] * c["C"]) % 8 == 0 and (c["n"] * c["C"]) % 32 for c in STAGED_K32)


@pytest.mark.parametrize("cfg", STAGED_K32, ids=lambda c: "n{n}-C{C}-{layout}-tf32{tf32:d}-w{weight:d}-M{M}".format(**c))
def test_staged_forward_with_no_dividing_chunk(cfg):
    s = spec("project", "fwd", cfg["n"], "bf16", cfg["layout"], cfg["C"], tf32=cfg["tf32"], weight=cfg["weight"])
    check_on_kernel_path(s, cfg["M"], case_seed("staged32", tuple(cfg.values())))


# K % 32 == 0 with the widest chunk (128 columns) not dividing K (n = 8, C =
# 5124; n = 4, C = 4104: K % 128 = 32): that chunk with its last one masked
# at K, not a narrower dividing one (half the aligned C's speed before).
STAGED_WIDE = [dict(n=n, C=C, act="bf16", layout=("cn", "nc")[i % 2], tf32=bool(i % 4 != 1), weight=bool(i % 3 == 0),
                    M=(1, 77, 4099, 130, 256)[i % 5])
               for i, (n, C) in enumerate([(8, 5124), (4, 4104), (2, 2192), (4, 5128), (4, 7176), (8, 5124), (4, 4104),
                                           (2, 2192), (6, 2144), (8, 20)])]
assert all((c["n"] * c["C"]) % 32 == 0 and (c["n"] * c["C"]) % 128 for c in STAGED_WIDE)


@pytest.mark.parametrize("cfg", STAGED_WIDE, ids=lambda c: "n{n}-C{C}-{layout}-tf32{tf32:d}-w{weight:d}-M{M}".format(**c))
def test_staged_forward_widest_chunk_masked(cfg):
    s = spec("project", "fwd", cfg["n"], "bf16", cfg["layout"], cfg["C"], tf32=cfg["tf32"], weight=cfg["weight"])
    check_on_kernel_path(s, cfg["M"], case_seed("widest", tuple(cfg.values())))


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
                                              (3, 5127, "bf16", "nc", 300), (6, 5124, "bf16", "cn", 300),
                                              (1, 33, "f32", "cn", 1031), (5, 4097, "f16", "nc", 4099),
                                              (6, 5127, "bf16", "cn", 300)])
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


# The one-wave kernel at K % 64 != 0 with 16-byte rows (K % 8 == 0: n = 6
# at C = 0 mod 4, n = 8 at C != 0 mod 8; bf16 x, tf32, no weight, sm_90a;
# docs/design/project.md, "Any K"): the last block's boxes past K (zeros on
# load, not stored; phi masked, gphi stored below K). n = 6, C = 5124: 121
# blocks of 4 boxes, the last with one box of 24 columns and three past K;
# n = 8, C = 5121: 129 blocks of 5 boxes, the last's first 8 columns wide;
# n = 6, C = 12 (K = 72): two blocks of one box, the second's 8 columns
# wide. M from one token through partial steps (63, 65) to many; both
# layouts; acc none, in x's dtype and TE's f32 buffer (launch "acc").
WIDE_TAIL = [dict(n=n, C=C, layout=lay, M=M, acc=acc)
             for i, ((n, C), M) in enumerate(itertools.product(((6, 5124), (8, 5121), (6, 12)),
                                                               (1, 2, 3, 63, 64, 65, 4099)))
             for lay, acc in [(("cn", "nc")[i % 2], ("none", "x", "f32")[i % 3])]]
assert all((c["n"] * c["C"]) % 8 == 0 and (c["n"] * c["C"]) % 64 != 0 for c in WIDE_TAIL)
# The same kernel where x's rows are 8- or 4-byte aligned (n = 6 at C % 4
# != 0: K % 8 = 4, 2, 6): x by P = 2 or 4 phase maps (every P-th token,
# maps 1 .. P - 1 from the 16-byte boundary below their first token, copied
# into the swizzled boxes by the producer warpgroup), gx stored in pieces
# (16 bytes for map 0's rows, the alignment for the others) with acc added
# there (no launch "acc"). C = 5126 (K % 8 = 4: two maps), 5127 and 5121
# (K % 8 = 2, 6: four maps), 11 and 14 (K = 66, 84: two blocks of one box,
# the second's 2 and 20 columns wide). M = 1, 2, 3: maps with no token.
WIDE_PIECES = [dict(n=6, C=C, layout=lay, M=M, acc=acc)
               for i, (C, M) in enumerate(itertools.product((5126, 5127, 5121, 11, 14), (1, 2, 3, 63, 64, 65, 4099)))
               for lay, acc in [(("cn", "nc")[i % 2], ("none", "x", "f32")[i % 3])]]
assert all((c["n"] * c["C"]) % 8 != 0 for c in WIDE_PIECES)


def wide_launch_params(n, layout, C, acc):
    """The main launch's parameters of the kernel project_backward runs on
    an sm_90 GPU (bf16, tf32, no weight): the one-wave kernel's tensor maps."""
    extra = {"none": "", "x": "acc=1;", "f32": "acc=f32;"}[acc]
    s = mhc._C.canonical_spec(f"project.bwd;n={n};act=bf16;param=f32;layout={layout};C={C};tf32=1;weight=0;"
                              f"{extra}arch=sm_90a")
    d = mhc._C.resolve_kernel(s)["path"]  # a cache entry or a bundle: its index names the files
    with open(os.path.join(d, "index.json")) as f:
        (name,) = [k["kernel"] for k in json.load(f)["kernels"] if k["spec"] == s]
    with open(os.path.join(d, name + ".json")) as f:
        return [p for l in json.load(f)["launches"] if l["entry"].endswith("_main") for p in l["params"]]


@pytest.mark.parametrize("cfg", WIDE_TAIL + WIDE_PIECES,
                         ids=lambda c: "n{n}-C{C}-{layout}-M{M}-acc_{acc}".format(**c))
def test_one_wave_backward_at_k_mod_64(cfg):
    n, C, lay, M, acc_mode = cfg["n"], cfg["C"], cfg["layout"], cfg["M"], cfg["acc"]
    if torch.cuda.get_device_capability() == (9, 0):  # the route under test
        params = wide_launch_params(n, lay, C, acc_mode)
        if (n * C) % 8 == 0:
            assert params[:2] == ["tmap16:x", "tmap16:gx"]
        else:
            P = 2 if (n * C) % 8 == 4 else 4
            maps = [p.split(":")[0].split(",")[:3] for p in params[:2 * P - 1]]
            edges = [["tmap1", str(P), str(r)] for r in range(1, P)]  # the last step's
            assert maps == [[f"tmap{16 // P}", str(P), str(r)] for r in range(P)] + edges, params
            assert params[2 * P - 1] == "gx", params
    s = spec("project", "bwd", n, "bf16", lay, C, tf32=True)
    seed = case_seed("wide-tail", tuple(cfg.values()))
    if acc_mode == "none":
        check_on_kernel_path(s, M, seed)
        return
    check_backward_with_acc(s, M, seed, acc_mode, cfg, acc_added_to_rounded=True)
