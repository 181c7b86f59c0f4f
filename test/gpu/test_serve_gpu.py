"""The GPU suite of the decode-size forward in one launch (issue 36,
docs/design/serve.md): torch.ops.mhc.post_pre / pre at M <= the one-launch
threshold run the cooperative kernel (spec field coop=1). Checked: every
result against float64 SPEC.md (each stage on the kernel's own inputs to it),
run to run bitwise, x_next bitwise and the rest within SPEC.md's bounds of the
multi-launch path (the same tokens inside a batch past the threshold: a
different split of the projection's sums, documented), the seam bitwise
mhc.post then mhc.pre (both one-launch), n 1..8, both layouts, 2- and 4-byte
activations, M from 1 to the threshold and across it, the kernel each M
requests, and capture and replay inside a CUDA graph (several seams in one
graph, replayed twice, the same bits as eager), back-to-back seams (on
sm_90+ programmatic dependent launches that overlap) the bits of
synchronized ones, eager and in a graph, two streams at once, and (a
child process with the runtime's knob) the one-launch kernel past the
threshold: its decode path (M <= 16, one grid barrier) and its two-barrier
path, and the two paths' bits on the same tokens.

Run on the GPU machine: pytest -q test/gpu/test_serve_gpu.py
"""

import os
import subprocess
import sys

import pytest
import torch

import mhc

sys.path.insert(0, os.path.dirname(__file__))
from test_seam_gpu import (FWD_ARGS, arch, attrs, case_seed, forward64, inputs,  # noqa: E402
                           rel, seam_spec)

assert torch.cuda.is_available(), "the GPU suite needs a GPU"
LIMIT = mhc._C.ONE_LAUNCH_MAX_TOKENS
RESULTS = []  # (output, rel, bound, case) for the summary


def cfg_of(n, act, layout, C, M, **kw):
    c = dict(n=n, act=act, layout=layout, C=C, M=M, mode="log", tf32=False, weight=False, bias=False,
             norm_eps=1e-6, pre_eps=1e-6)
    c.update(kw)
    return c


# n 1..8, both layouts, 2- and 4-byte activations, bias / weight / tf32 /
# softmax_eps / bf16 parameters spread over them; M from 1 to the threshold.
CONFIGS = [
    cfg_of(1, "f32", "nc", 64, 1, bias=True),
    cfg_of(2, "f16", "cn", 1000, 7, mode="softmax_eps", weight=True),
    cfg_of(3, "bf16", "nc", 520, 16, tf32=True),
    cfg_of(4, "bf16", "cn", 4096, 1, tf32=True, norm_eps=1.1920929e-07, pre_eps=0.0),  # the bench's, decode
    cfg_of(4, "bf16", "cn", 7168, 128, tf32=True, norm_eps=1.1920929e-07, pre_eps=0.0),
    cfg_of(4, "bf16", "nc", 7168, 255, mode="softmax_eps", weight=True, bias=True),
    cfg_of(4, "f32", "nc", 2048, LIMIT, weight=True, bias=True, param="bf16"),
    cfg_of(5, "bf16", "nc", 1008, 33, bias=True),
    cfg_of(6, "f16", "nc", 1000, 5, mode="softmax_eps", weight=True, bias=True),
    cfg_of(7, "bf16", "cn", 520, 64, mode="softmax_eps", tf32=True, weight=True),
    cfg_of(8, "bf16", "cn", 2048, 100, tf32=True, bias=True),
    cfg_of(8, "f32", "nc", 96, 3, weight=True, bias=True),
    cfg_of(8, "bf16", "nc", 7168, 2, weight=True),
]


def _id(c):
    return "n{n}-{act}-{layout}-C{C}-M{M}-{mode}-tf32{tf32:d}-w{weight:d}-b{bias:d}".format(**c)


def _fwd(t):
    return tuple(t[k] for k in FWD_ARGS)


def _twice(op, *args):
    a, b = op(*args), op(*args)
    for u, v in zip(a, b):
        assert torch.equal(u, v), "two runs differ"
    return a


def requested(op, args):
    return mhc._C.requested_specs(op, tuple(args), arch())


def test_threshold_rule():
    """One rule on both sides: M in 1..LIMIT runs in one launch, nothing
    else (M < 0: dynamic; mhc-specialize keeps the multi-launch spec)."""
    assert mhc._C.forward_runs_in_one_launch(1) and mhc._C.forward_runs_in_one_launch(LIMIT)
    assert not mhc._C.forward_runs_in_one_launch(LIMIT + 1)
    assert not mhc._C.forward_runs_in_one_launch(0) and not mhc._C.forward_runs_in_one_launch(-1)


@pytest.mark.parametrize("M", [1, LIMIT, LIMIT + 1])
def test_the_kernel_each_m_requests(M):
    """post_pre and pre request the coop=1 spec up to the threshold and the
    multi-launch spec past it (SpecOf.cpp mirrors SeamOps.cpp / PreOps.cpp)."""
    cfg = cfg_of(4, "bf16", "cn", 512, M)
    gen = torch.Generator(device="cuda").manual_seed(case_seed("rule", M))
    t = inputs(cfg, gen)
    specs = requested("post_pre", _fwd(t) + attrs(cfg))
    want = seam_spec(cfg, "fwd")
    if M <= LIMIT:
        want = want.replace(";arch=", ";coop=1;arch=")
    assert specs == [mhc._C.canonical_spec(want)]
    pre = requested("pre", (t["x"], t["phi"], t["alpha"], t["beta"], None) + attrs(cfg))
    assert pre[0].startswith("pre.fwd;") and ((";coop=1;" in pre[0]) == (M <= LIMIT))


def _pre_args(cfg, t, x):
    return (x, t["phi"], t["alpha"], t["beta"], t["weight"]) + attrs(cfg)


@pytest.mark.parametrize("cfg", CONFIGS, ids=_id)
def test_one_launch_matches_float64(cfg):
    """The seam's one-launch forward: each result against float64 SPEC.md on
    the kernel's own inputs to its stage, two runs bitwise, post_pre's four
    results post_pre_saved's; the pre step's one-launch kernel on x_next
    gives the seam's bits (the same code and order); no reference calls."""
    gen = torch.Generator(device="cuda").manual_seed(case_seed("serve", _id(cfg)))
    t = inputs(cfg, gen)
    a = attrs(cfg)
    before = mhc._C.stats()
    saved = _twice(torch.ops.mhc.post_pre_saved, *_fwd(t), *a)
    x_next, h, ms, pre, post_next, logits, P_next, y = saved
    plain = torch.ops.mhc.post_pre(*_fwd(t), *a)
    for u, v in zip(plain, (x_next, y, post_next, P_next)):
        assert torch.equal(u, v)
    alone = _twice(torch.ops.mhc.pre_saved, *_pre_args(cfg, t, x_next))
    for name, u, v in zip(("y", "post", "P", "h", "ms", "pre", "logits"), alone,
                          (y, post_next, P_next, h, ms, pre, logits)):
        assert torch.equal(u, v), f"pre's one-launch {name} differs from the seam's"
    after = mhc._C.stats()
    assert after["reference_calls"] == before["reference_calls"], (before, after)
    for name, got, want, bound in forward64(cfg, t, saved):
        err = rel(got.reshape(want.shape), want.detach())
        RESULTS.append((f"one-launch {name}", err, bound, _id(cfg)))
        assert torch.isfinite(got).all(), f"{name}: non-finite ({cfg})"
        assert err <= bound, f"{name}: rel err {err:.3e} > {bound:.0e} ({cfg})"


def _padded(cfg, t, gen):
    """t with LIMIT + 1 - M more random tokens after its own: the same first
    M tokens through the multi-launch path."""
    extra = inputs(dict(cfg, M=LIMIT + 1), gen)
    return {k: None if v is None else (torch.cat([v, extra[k][cfg["M"]:]]) if k in ("f", "post", "x", "P") else v)
            for k, v in t.items()}


@pytest.mark.parametrize("cfg", CONFIGS, ids=_id)
def test_one_launch_against_the_multi_launch_path(cfg):
    """The same tokens through the multi-launch kernel (in a batch past the
    threshold): x_next bitwise (the same expand_combine); h, ms, pre,
    post_next, logits, P_next and y within SPEC.md's bounds of it (the
    projection's sum is split differently: docs/design/serve.md)."""
    gen = torch.Generator(device="cuda").manual_seed(case_seed("paths", _id(cfg)))
    t = inputs(cfg, gen)
    a = attrs(cfg)
    small = torch.ops.mhc.post_pre_saved(*_fwd(t), *a)
    big = torch.ops.mhc.post_pre_saved(*_fwd(_padded(cfg, t, gen)), *a)
    M = cfg["M"]
    act = 1e-2 if cfg["act"] != "f32" else 1e-5
    # Twice SPEC.md's bound (both paths are within it of float64): the
    # activations' for y, TF32's for what follows h where the spec has tf32.
    mixing = 4e-3 if cfg["tf32"] else 2e-5
    bounds = dict(h=mixing, ms=2e-5, pre=mixing, post_next=mixing, logits=mixing, P_next=mixing,
                  y=max(2 * act, mixing))
    names = ("x_next", "h", "ms", "pre", "post_next", "logits", "P_next", "y")
    for name, u, v in zip(names, small, big):
        v = v[:M]
        if name == "x_next":
            assert torch.equal(u, v), "x_next differs from the multi-launch path's"
            continue
        err = rel(u, v.double())
        RESULTS.append((f"one-launch vs multi-launch {name}", err, bounds[name], _id(cfg)))
        assert err <= bounds[name], f"{name}: {err:.3e} > {bounds[name]:.0e} ({cfg})"


@pytest.mark.parametrize("M", [LIMIT - 1, LIMIT, LIMIT + 1, LIMIT + 7])
def test_across_the_threshold(M):
    """M around the threshold: both kernels within float64 SPEC.md, run to
    run bitwise, x_next bitwise expand_combine's."""
    cfg = cfg_of(4, "bf16", "nc", 1024, M, weight=True, bias=True)
    gen = torch.Generator(device="cuda").manual_seed(case_seed("across", M))
    t = inputs(cfg, gen)
    saved = _twice(torch.ops.mhc.post_pre_saved, *_fwd(t), *attrs(cfg))
    x_next = torch.ops.mhc.expand_combine(t["f"], t["post"], t["x"], t["P"], t["bias"], cfg["n"], cfg["layout"])
    assert torch.equal(saved[0], x_next)
    for name, got, want, bound in forward64(cfg, t, saved):
        err = rel(got.reshape(want.shape), want.detach())
        RESULTS.append((f"across {name}", err, bound, _id(cfg)))
        assert err <= bound, f"{name}: rel err {err:.3e} > {bound:.0e} (M = {M})"


def _chain(t, cfg, x, seams):
    """`seams` seams in a row, each seam's x_next the next one's x and its y
    the next one's f (shapes agree: [M, C])."""
    a = attrs(cfg)
    outs = []
    f = t["f"]
    for _ in range(seams):
        x, y, post, P = torch.ops.mhc.post_pre(f, t["post"], x, t["P"], t["bias"], t["phi"], t["alpha"], t["beta"],
                                               t["weight"], *a)
        outs += [x, y, post, P]
        f = y
    return outs


@pytest.mark.parametrize("cfg", [CONFIGS[3], CONFIGS[5], CONFIGS[11]], ids=_id)
def test_cuda_graph_capture_and_replay(cfg):
    """Four seams captured in one CUDA graph (static addresses, the runtime's
    sync words baked in): replayed twice, the same bits each time and as
    eager; new inputs copied into the static ones give eager's bits for
    them."""
    gen = torch.Generator(device="cuda").manual_seed(case_seed("graph", _id(cfg)))
    t = inputs(cfg, gen)
    with torch.no_grad():
        eager = _chain(t, cfg, t["x"], 4)  # also loads the kernel before capture
        static_x = t["x"].clone()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            _chain(t, cfg, static_x, 4)
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = _chain(t, cfg, static_x, 4)
        for _ in range(2):
            graph.replay()
            torch.cuda.synchronize()
            for u, v in zip(static_out, eager):
                assert torch.equal(u, v), "a replay differs from eager"
        fresh = torch.randn(t["x"].shape, generator=gen, device="cuda").to(t["x"].dtype)
        static_x.copy_(fresh)
        graph.replay()
        for u, v in zip(static_out, _chain(t, cfg, fresh, 4)):
            assert torch.equal(u, v), "a replay on new inputs differs from eager"


def _pingpong(t, cfg, outs, seams, sync):
    """`seams` seams into two preallocated output sets in turn (mhc.inference,
    out=): seam i writes what seam i - 2 wrote and seam i - 1 read. With
    `sync`, a device synchronize after each seam (no two grids overlap)."""
    import mhc.inference as mi
    n, layout, tf32, norm_eps, pre_eps, post_mult, mode, iters, eps = attrs(cfg)
    f, post, x, P = t["f"], t["post"], t["x"], t["P"]
    for i in range(seams):
        x, f, post, P = mi.post_pre(f, post, x, P, t["phi"], t["alpha"], t["beta"], t["weight"], t["bias"],
                                    out=outs[i % 2], layout=layout, tf32=tf32, norm_eps=norm_eps,
                                    pre_eps=pre_eps, post_mult=post_mult, mode=mode, iters=iters, eps=eps)
        if sync:
            torch.cuda.synchronize()
    return [v.clone() for v in (x, f, post, P)]


@pytest.mark.parametrize("cfg", [CONFIGS[3], cfg_of(4, "bf16", "cn", 7168, 16, tf32=True), CONFIGS[11]], ids=_id)
def test_overlapped_launches_match_synchronized(cfg):
    """On sm_90+ the one-launch kernel is a programmatic dependent launch: a
    seam's grid starts during the previous seam's tail and waits for it
    (griddepcontrol.wait) before any global access. Eight seams back to
    back, eager and replayed from one CUDA graph, into two output sets in
    turn (each seam overwrites what the seam before last wrote and the
    previous seam read), give the bits of the same seams with a device
    synchronize after each."""
    gen = torch.Generator(device="cuda").manual_seed(case_seed("pdl", _id(cfg)))
    t = inputs(cfg, gen)
    import mhc.inference as mi
    with torch.no_grad():
        outs = [mi.empty_post_pre(t["x"], layout=cfg["layout"]) for _ in range(2)]
        want = _pingpong(t, cfg, outs, 8, sync=True)
        assert all(torch.isfinite(v).all() for v in want)
        for _ in range(3):
            got = _pingpong(t, cfg, outs, 8, sync=False)
            torch.cuda.synchronize()
            for u, v in zip(got, want):
                assert torch.equal(u, v), "back-to-back seams differ from synchronized ones"
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            _pingpong(t, cfg, outs, 8, sync=False)
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            last = _pingpong(t, cfg, outs, 8, sync=False)
        for _ in range(3):
            graph.replay()
            torch.cuda.synchronize()
            for u, v in zip(last, want):
                assert torch.equal(u, v), "a replay differs from synchronized seams"


def test_two_streams_at_once():
    """Cooperative launches on two streams at once (each stream its own sync
    words): the bits of the same calls one after the other."""
    cfg = cfg_of(4, "bf16", "cn", 4096, 16, tf32=True)
    gen = torch.Generator(device="cuda").manual_seed(case_seed("streams"))
    ts = [inputs(cfg, gen) for _ in range(2)]
    with torch.no_grad():
        want = [_chain(t, cfg, t["x"], 8) for t in ts]
        streams = [torch.cuda.Stream() for _ in ts]
        got = []
        for s, t in zip(streams, ts):
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                got.append(_chain(t, cfg, t["x"], 8))
        for s in streams:
            torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
    for g, w in zip(got, want):
        for u, v in zip(g, w):
            assert torch.equal(u, v)


# Run in a child process with MHC_ONE_LAUNCH_MAX_TOKENS=256 (the runtime reads
# the knob once per process): CONFIGS past the threshold through the one-launch
# kernel, decode path (M <= 16) and two-barrier path (M past the tile).
_KNOB_CHILD = r"""
import sys
sys.path.insert(0, {here!r})
import torch
import test_serve_gpu as s
for i in {configs!r}:
    cfg = s.CONFIGS[i]
    gen = torch.Generator(device="cuda").manual_seed(s.case_seed("knob", s._id(cfg)))
    t = s.inputs(cfg, gen)
    a = s.attrs(cfg)
    spec = s.requested("post_pre", s._fwd(t) + a)
    assert ";coop=1;" in spec[0], spec
    saved = s._twice(torch.ops.mhc.post_pre_saved, *s._fwd(t), *a)
    alone = s._twice(torch.ops.mhc.pre_saved, *s._pre_args(cfg, t, saved[0]))
    for u, v in zip(alone, [saved[k] for k in (7, 4, 6, 1, 2, 3, 5)]):
        assert torch.equal(u, v), "pre's one-launch kernel differs from the seam's (" + s._id(cfg) + ")"
    for name, got, want, bound in s.forward64(cfg, t, saved):
        err = s.rel(got.reshape(want.shape), want.detach())
        assert torch.isfinite(got).all() and err <= bound, (name, err, bound, s._id(cfg))
print("knob: ok")
"""


def test_one_launch_past_the_threshold_under_the_knob():
    """The one-launch kernel at M past the threshold (the runtime's benchmark
    knob, as bench/probes/one_launch_probe.py runs it): its decode path (M
    <= 16, where the threshold is below) and two-barrier path (M = 33, 64,
    100, 128, 255; n 4, 5, 7, 8, both layouts) within float64 SPEC.md, run
    to run bitwise, pre's one-launch kernel on x_next the seam's bits."""
    configs = [i for i, c in enumerate(CONFIGS) if c["M"] > LIMIT]
    assert any(CONFIGS[i]["M"] > 16 for i in configs)  # (the kernel's tile: 16 tokens)
    child = _KNOB_CHILD.format(here=os.path.dirname(os.path.abspath(__file__)), configs=configs)
    env = dict(os.environ, MHC_ONE_LAUNCH_MAX_TOKENS="256")
    r = subprocess.run([sys.executable, "-c", child], env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0 and "knob: ok" in r.stdout, r.stdout[-2000:] + r.stderr[-4000:]


# In a child with MHC_ONE_LAUNCH_MAX_TOKENS=256: the decode path (M <= 16: the
# owner's sums in the same round of loads as every block's pre) against the
# two-barrier path (M = 33: sumPartials, the order of main's kernel) on the
# same tokens.
_PATHS_CHILD = r"""
import sys
sys.path.insert(0, {here!r})
import torch
import test_serve_gpu as s
for n, act, layout, C, kw in {cases!r}:
    big = s.cfg_of(n, act, layout, C, 33, **kw)
    gen = torch.Generator(device="cuda").manual_seed(s.case_seed("paths", s._id(big)))
    t = s.inputs(big, gen)
    a = s.attrs(big)
    whole = torch.ops.mhc.post_pre_saved(*s._fwd(t), *a)
    for M in (1, 5, 16):
        part = dict(t, f=t["f"][:M], post=t["post"][:M], x=t["x"][:M], P=t["P"][:M])
        assert ";coop=1;" in s.requested("post_pre", s._fwd(part) + a)[0]
        head = torch.ops.mhc.post_pre_saved(*s._fwd(part), *a)
        for k, (u, v) in enumerate(zip(head, whole)):
            assert torch.equal(u, v[:M]), (k, M, s._id(big))
print("paths: ok")
"""


def test_decode_path_bits_match_the_two_barrier_path():
    """The one-launch kernel's decode path (M = 1, 5, 16: one grid barrier,
    the owner's sums loaded with every block's pre) gives, token for token,
    the bits of its two-barrier path (the same tokens at M = 33, whose
    finish is main's): every result of post_pre_saved (n 1, 4, 8, both
    layouts, bf16 and f32, log and softmax_eps, weight and bias)."""
    cases = [(4, "bf16", "cn", 4096, dict(tf32=True, norm_eps=1.1920929e-07, pre_eps=0.0)),
             (4, "bf16", "cn", 7168, dict(tf32=True, norm_eps=1.1920929e-07, pre_eps=0.0)),
             (1, "f32", "nc", 64, dict(bias=True)),
             (8, "f32", "nc", 96, dict(weight=True, bias=True, mode="softmax_eps")),
             (3, "bf16", "cn", 1000, dict(weight=True))]
    child = _PATHS_CHILD.format(here=os.path.dirname(os.path.abspath(__file__)), cases=cases)
    env = dict(os.environ, MHC_ONE_LAUNCH_MAX_TOKENS="256")
    r = subprocess.run([sys.executable, "-c", child], env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0 and "paths: ok" in r.stdout, r.stdout[-2000:] + r.stderr[-4000:]


def test_summary():
    """Prints the worst relative error per output against its bound."""
    worst = {}
    for name, err, bound, case in RESULTS:
        if name not in worst or err / bound > worst[name][0] / worst[name][1]:
            worst[name] = (err, bound, case)
    for name, (err, bound, case) in sorted(worst.items()):
        print(f"{name:40s} {err:.2e} <= {bound:.0e}  ({case})")
