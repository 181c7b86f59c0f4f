"""Where a seam's eager host time goes (issue 36): the layers between Python and the launches, each timed
back to back (wall clock per call, then one synchronize), and a profile of one call's launches and
allocations. Prints a table; writes nothing.

    python3 bench/probes/seam_host_probe.py [--config M,C ...]

Rows per (M, C), n = 4, bf16, TE's conventions (bench/serve.py's):
- graph: the seam replayed from a CUDA graph (the GPU's time; the eager rows cannot go below it);
- mhc.inference.post_pre: the out= API from Python;
- _C.post_pre_out: its eager entry point called directly (no Python wrapper);
- torch.ops.mhc.post_pre_out: the boxed dispatcher call (what torch.compile's graphs call);
- mhc.post_pre: the training API under no_grad (allocates its four outputs);
- HyperConnection.post_pre: the module's method (small_m_probe.py's baseline row);
- python only: mhc.inference.post_pre with the C++ entry stubbed out (the wrapper's own time).
"""

import argparse
import statistics
import time

import torch

import mhc
import mhc.inference as mi
from mhc import _C

DEV = "cuda"
N_STREAMS = 4
CONV = dict(layout="cn", tf32=True, norm_eps=torch.finfo(torch.float32).eps, pre_eps=0.0, post_mult=2.0, mode="log",
            iters=20, eps=1e-6)
ATTRS = (N_STREAMS, "cn", True, CONV["norm_eps"], 0.0, 2.0, "log", 20, 1e-6)


def per_call_us(fn, calls=200, repeats=7):
    """Median over `repeats` of (calls back to back, then synchronize) / calls."""
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(times)


def graph_us(fn, seams=8):
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(seams):
            fn()
    return per_call_us(graph.replay, calls=50) / seams


def profile(fn, calls=20):
    """(launches, allocations, mhc op CPU us) per call, from torch.profiler."""
    from torch.profiler import ProfilerActivity, profile as prof
    with prof(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    events = p.key_averages()
    count = lambda pred: sum(e.count for e in events if pred(e.key))
    launches = count(lambda k: k in ("cuLaunchKernel", "cudaLaunchKernel", "cuLaunchKernelEx", "cudaLaunchKernelExC"))
    allocs = count(lambda k: k.startswith("aten::empty"))
    op = next((e for e in events if e.key == "mhc::post_pre_out"), None)
    return launches / calls, allocs / calls, (op.cpu_time_total / op.count if op else None)


def config(M, C):
    g = torch.Generator(DEV).manual_seed(0)
    n, N, K = N_STREAMS, 2 * N_STREAMS + N_STREAMS ** 2, N_STREAMS * C
    x = torch.randn(M, C, n, generator=g, device=DEV).bfloat16()
    f = torch.randn(M, C, generator=g, device=DEV).bfloat16()
    post, P = 2 * torch.rand(M, n, device=DEV), torch.softmax(torch.randn(M, n, n, device=DEV), -2)
    phi = torch.randn(N, K, generator=g, device=DEV) / K ** 0.5
    alpha, beta = torch.rand(3, device=DEV), 0.1 * torch.randn(N, device=DEV)
    out = mi.empty_post_pre(x, layout="cn")
    hc = mhc.HyperConnection(n, C, device=DEV, norm_weight=False, bias=False, **CONV)
    rows = {}
    with torch.no_grad():
        api = lambda: mi.post_pre(f, post, x, P, phi, alpha, beta, out=out, **CONV)
        rows["graph"] = graph_us(api)
        rows["mhc.inference.post_pre"] = per_call_us(api)
        rows["_C.post_pre_out"] = per_call_us(lambda: _C.post_pre_out(
            f, post, x, P, None, phi, alpha, beta, None, "cn", True, CONV["norm_eps"], 0.0, 2.0, "log", 20, 1e-6,
            *out))
        rows["torch.ops.mhc.post_pre_out"] = per_call_us(lambda: torch.ops.mhc.post_pre_out(
            f, post, x, P, None, phi, alpha, beta, None, *ATTRS, x_next=out[0], y=out[1], post_next=out[2],
            P_next=out[3]))
        rows["mhc.post_pre"] = per_call_us(lambda: mhc.post_pre(f, post, x, P, phi, alpha, beta, **CONV))
        state = (post, x, P)
        rows["HyperConnection.post_pre"] = per_call_us(lambda: hc.post_pre(f, state, hc))
        real = _C.post_pre_out
        _C.post_pre_out = lambda *a: None
        try:
            rows["python only"] = per_call_us(api, calls=2000)
        finally:
            _C.post_pre_out = real
        launches, allocs, op_us = profile(api)
    for name, v in rows.items():
        print(f"M={M:4d} C={C:5d} {name:28s} {v:7.1f} us/call", flush=True)
    print(f"M={M:4d} C={C:5d} per mhc.inference.post_pre call: {launches:.1f} kernel launches, {allocs:.1f} aten::empty,"
          f" mhc::post_pre_out {op_us if op_us is None else round(op_us, 1)} us CPU (profiled)", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", action="append", default=None, metavar="M,C")
    a = ap.parse_args()
    print(torch.cuda.get_device_name())
    configs = [tuple(int(v) for v in c.split(",")) for c in a.config] if a.config else [
        (M, C) for C in (4096, 7168) for M in (1, 16, 128)]
    for M, C in configs:
        config(M, C)
    print(_C.stats())


if __name__ == "__main__":
    main()
