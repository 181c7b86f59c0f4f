"""The GPU suite of mhc.inference (torch.ops.mhc.post_pre_out, pre_out,
expand_combine_out): on CUDA, bitwise equal to the training ops' forward
(mhc.post_pre, mhc.pre, mhc.post under no_grad) through the same path (the
same kernel and reference call counts), for n 1..8, both layouts, TE's and
DeepSeek's conventions, M across the pre step's fusion threshold; and a CUDA
graph holding a whole forward (first pre, seams, last post) replayed on new
inputs: the same bits as eager, written at the static addresses.

Run on the GPU machine: pytest -q test/gpu/test_inference_gpu.py (after
test/gpu/setup-gpu.sh). The kernels of every case are compiled up front, in
parallel processes.
"""

import concurrent.futures
import math
import os
import subprocess
import sys
import zlib

import pytest
import torch

import mhc
import mhc.inference as mi

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
# The conventions and argument orders of the CPU suite (its tests are not collected here).
from test_inference import DEEPSEEK, TE, post_args, pre_args, seam_args  # noqa: E402

assert torch.cuda.is_available(), "the GPU suite needs a GPU"
SEED = int(os.environ.get("MHC_SEED") or int.from_bytes(os.urandom(4), "little"))
DEV = "cuda"

C = 512
# (n, conventions, bias, weight); M below. TE's conventions come with layout cn, DeepSeek's with nc, and each
# n runs both.
CASES = [(n, conv, n % 2 == 0, n % 3 != 0) for n in range(1, 9) for conv in ("deepseek", "te")]
# M = 1 and 16 (decode), 128, and 600, past the fused pre step's largest M for n > 4 (mhc.pre_step_fuses).
TOKENS = (1, 16, 128, 600)


def _ids(c):
    return "n{}-{}-bias{:d}-w{:d}".format(*c)


def opts_of(conv):
    return dict(TE if conv == "te" else DEEPSEEK)


def inputs(n, M, layout, bias, weight, seed):
    """One seam's inputs on the GPU (bf16 activations, fp32 mixing and parameters)."""
    g = torch.Generator(DEV).manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g, device=DEV)
    N, K = 2 * n + n * n, n * C
    x = r(M, n, C) if layout == "nc" else r(M, C, n)
    return dict(f=r(M, C).bfloat16(), post=2 * torch.sigmoid(r(M, n)), x=x.bfloat16(),
                P=torch.softmax(r(M, n, n), -2), bias=0.5 * r(C) if bias else None,
                phi=r(N, K) / math.sqrt(K), alpha=torch.rand(3, generator=g, device=DEV) + 0.5, beta=0.5 * r(N),
                weight=1 + 0.1 * r(K) if weight else None)


def arch():
    major, _ = torch.cuda.get_device_capability()
    return {9: "sm_90a", 10: "sm_100a"}.get(major, "sm_80")


def schema_args(op, t, n, o):
    """The torch op's arguments (its schema's order) for mhc._C.requested_specs."""
    attrs = (n, o["layout"], o["tf32"], o["norm_eps"], o["pre_eps"], o["post_mult"], o["mode"], o["iters"], o["eps"])
    if op == "post_pre":
        return (t["f"], t["post"], t["x"], t["P"], t["bias"], t["phi"], t["alpha"], t["beta"], t["weight"], *attrs)
    if op == "pre":
        return (t["x"], t["phi"], t["alpha"], t["beta"], t["weight"], *attrs)
    return (t["f"], t["post"], t["x"], t["P"], t["bias"], n, o["layout"])


@pytest.fixture(scope="module", autouse=True)
def compiled_up_front():
    """Every kernel the suite's calls ask for, compiled (or found in the cache) in parallel."""
    specs = set()
    for n, conv, bias, weight in CASES:
        o = opts_of(conv)
        for M in TOKENS:
            t = inputs(n, M, o["layout"], bias, weight, seed=0)
            for op in ("post_pre", "pre", "expand_combine"):
                specs.update(mhc._C.requested_specs(op, schema_args(op, t, n, o), arch()))
    specs = sorted(s for s in specs if not mhc._C.unsupported_reason(s))
    # One process per spec: the runtime's cache compiles one spec at a time per process (KernelCache's
    # lock), but specs in different processes at once (a file lock per spec); the tests find them on disk.
    resolve = "import sys, mhc; mhc._C.resolve_kernel(sys.argv[1])"
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 4) as pool:
        runs = list(pool.map(lambda s: subprocess.run([sys.executable, "-c", resolve, s], capture_output=True,
                                                      text=True), specs))
    failed = [(s, r.stderr.strip()[-300:]) for s, r in zip(specs, runs) if r.returncode]
    assert not failed, failed


def calls():
    s = mhc._C.stats()
    return s["kernel_calls"], s["reference_calls"]


def same_path_and_bits(run_inference, run_training):
    """Both runs' results bitwise equal, through as many kernel and reference calls."""
    before = calls()
    got = run_inference()
    mid = calls()
    want = run_training()
    after = calls()
    assert (mid[0] - before[0], mid[1] - before[1]) == (after[0] - mid[0], after[1] - mid[1])
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        assert torch.equal(g, w), (g.float() - w.float()).abs().max().item()


@pytest.mark.parametrize("M", TOKENS)
@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_bitwise_equal_to_the_training_forward(case, M):
    n, conv, bias, weight = case
    o = opts_of(conv)
    t = inputs(n, M, o["layout"], bias, weight, seed=SEED + zlib.crc32(repr((case, M)).encode()) % 100000)
    with torch.no_grad():
        same_path_and_bits(lambda: mi.post_pre(*seam_args(t), out=mi.empty_post_pre(t["x"], layout=o["layout"]), **o),
                           lambda: mhc.post_pre(*seam_args(t), **o))
        same_path_and_bits(lambda: mi.pre(*pre_args(t), out=mi.empty_pre(t["x"], layout=o["layout"]), **o),
                           lambda: mhc.pre(*pre_args(t), **o))
        same_path_and_bits(lambda: (mi.post(*post_args(t), out=mi.empty_post(t["x"]), layout=o["layout"]),),
                           lambda: (mhc.post(*post_args(t), layout=o["layout"]),))
    torch.cuda.synchronize()


SEAMS = 6


def forward(t, p, outs, o):
    """A whole forward through identity blocks: the first pre, SEAMS seams, the last post, into `outs`."""
    y, post, P = mi.pre(t["x"], *p, out=outs[0], **o)
    x = t["x"]
    for out in outs[1:-1]:
        x, y, post, P = mi.post_pre(y, post, x, P, *p, t["bias"], out=out, **o)
    return mi.post(y, post, x, P, t["bias"], out=outs[-1], layout=o["layout"])


def training_forward(t, p, o):
    """forward() through the training API (allocating); every intermediate result, in outs' order."""
    y, post, P = mhc.pre(t["x"], *p, **o)
    results, x = [(y, post, P)], t["x"]
    for _ in range(SEAMS):
        x, y, post, P = mhc.post_pre(y, post, x, P, *p, t["bias"], **o)
        results.append((x, y, post, P))
    results.append((mhc.post(y, post, x, P, t["bias"], layout=o["layout"]),))
    return results


@pytest.mark.parametrize("M", (1, 16))
@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_cuda_graph_of_a_whole_forward(case, M):
    """One CUDA graph of pre + SEAMS seams + post, captured once, replayed on two new inputs (copied
    into the captured input tensors): each replay writes the eager training forward's bits at the
    outputs' static addresses."""
    n, conv, bias, weight = case
    o = opts_of(conv)
    layout = o["layout"]
    seed = SEED + zlib.crc32(repr((case, M, "graph")).encode()) % 100000
    t = inputs(n, M, layout, bias, weight, seed)
    p = (t["phi"], t["alpha"], t["beta"], t["weight"])
    outs = ([mi.empty_pre(t["x"], layout=layout)] + [mi.empty_post_pre(t["x"], layout=layout)
                                                      for _ in range(SEAMS)] + [mi.empty_post(t["x"])])
    flat = [o_ for out in outs for o_ in (out if isinstance(out, tuple) else (out,))]
    addresses = [o_.data_ptr() for o_ in flat]
    with torch.no_grad():
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            forward(t, p, outs, o)  # warm: kernels loaded, workspaces in the caching allocator
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            forward(t, p, outs, o)
        for step in range(2):
            fresh = inputs(n, M, layout, bias, weight, seed + 1 + step)
            t["x"].copy_(fresh["x"])
            graph.replay()
            torch.cuda.synchronize()
            want = training_forward(t, p, o)
            assert [o_.data_ptr() for o_ in flat] == addresses
            got = [outs[0]] + outs[1:-1] + [(outs[-1],)]
            for i, (g_group, w_group) in enumerate(zip(got, want)):
                for g, w in zip(g_group, w_group):
                    assert torch.equal(g, w), (step, i, (g.float() - w.float()).abs().max().item())
