"""Host cost of the backward at small M (issue 34, part A): per-call host microseconds of each
backward op without the profiler; for the 4-layer identity stack's forward, backward and step,
per layer, host time vs the GPU's (CUDA-event span, and kernel time from the profiler), so one
sees whether the backward is host- or GPU-bound, and how much of its host time is outside the
ops (the autograd engine, the nodes); then a profile that leaves the profiler's own start-up
costs out (by CPU time, then by GPU time). Prints tables; writes nothing.

    python3 bench/probes/host_costs.py [--M 128] [--C 4096] [--device cpu (a smoke run of the code)]

Host time = perf_counter around `calls` back-to-back calls with no synchronisation (few enough
that CUDA's launch queue never fills, so the GPU's time does not count), divided by `calls`.
Under torch.profiler, each thread's first CUDA call pays a CUPTI activity-buffer
request (~3 ms on the H100 machine): with a plain `profile()` over a few steps it lands in the
first op of the forward (mhc::pre_saved) and in the first op the autograd engine's device
thread runs (the last layer's mhc::expand_combine_backward), which then look ~600 us per call
on average. The schedule below profiles only steps after a warm-up step.
"""
import argparse
import time

import torch

import host_timing
import mhc

DEV = "cuda"
CONV = dict(layout="cn", norm_weight=False, bias=False, tf32=True, mode="log", iters=20,
            norm_eps=1.1920929e-07, pre_eps=0.0, post_mult=2.0)
ATTRS = (4, "cn", True, 1.1920929e-07, 0.0, 2.0, "log", 20, 1e-6)  # n, layout, tf32, scale, sinkhorn


def sync():
    if DEV == "cuda":
        torch.cuda.synchronize()


def host_us(fn, calls=100, rounds=5):
    """Median over rounds of the host microseconds per call (no sync inside a round)."""
    return host_timing.host_us(fn, calls, rounds, 10, DEV == "cuda")


def op_rows(M, C):
    """Each backward op called directly (below autograd, as the nodes call them); name -> host us."""
    b, n = torch.bfloat16, 4
    x, f = torch.randn(M, C, n, device=DEV, dtype=b), torch.randn(M, C, device=DEV, dtype=b)
    post, P = torch.rand(M, n, device=DEV), torch.rand(M, n, n, device=DEV)
    hc = mhc.HyperConnection(n, C, device=DEV, **CONV)
    phi, alpha, beta = hc.phi.detach(), hc.alpha.detach(), hc.beta.detach()
    saved = torch.ops.mhc.post_pre_saved(f, post, x, P, None, phi, alpha, beta, None, *ATTRS)
    x_next, h, ms, pre, post_next, logits, P_next, y = saved
    g = [torch.randn_like(t) for t in (x_next, y, post_next, P_next)]
    ops = torch.ops.mhc
    rows = {
        "post_pre_backward": lambda: ops.post_pre_backward(*g, f, post, x, P, None, x_next, h, ms, pre, logits,
                                                           phi, alpha, beta, None, *ATTRS),
        "expand_combine_backward": lambda: ops.expand_combine_backward(g[0], f, post, x, P, None, 4, "cn", None),
        "aggregate_backward (acc)": lambda: ops.aggregate_backward(g[1], x, pre, 4, "cn", g[0]),
        "sinkhorn_backward": lambda: ops.sinkhorn_backward(g[3], logits, 4, "log", 20, 1e-6),
        "scale_backward": lambda: ops.scale_backward(pre, g[2], logits, h, ms, alpha, beta, 4,
                                                     *ATTRS[3:6]),
        "project_backward (acc)": lambda: ops.project_backward(h, ms, x, phi, None, 4, "cn", True, g[0]),
        "post_pre_saved (seam fwd)": lambda: ops.post_pre_saved(f, post, x, P, None, phi, alpha, beta, None,
                                                                *ATTRS),
        "torch.empty_like(x) (reference)": lambda: torch.empty_like(x),
    }
    out = {}
    for name, fn in rows.items():
        out[name] = host_us(fn)
        print(f"  {name:34s} {out[name]:7.1f} us host per call", flush=True)
    return out


def host_and_span(fn, calls=20, rounds=5):
    """Medians over rounds of (host us, GPU span us) per call: host = perf_counter around `calls`
    back-to-back calls; GPU span = CUDA events around the same calls, the GPU's timeline from the
    first launch to the last kernel's end, idle gaps included (on CPU: the host time)."""
    for _ in range(3):
        fn()
    host, span = [], []
    for _ in range(rounds):
        sync()
        if DEV == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        host.append((time.perf_counter() - t) / calls * 1e6)
        if DEV == "cuda":
            end.record()
            end.synchronize()
            span.append(start.elapsed_time(end) * 1e3 / calls)
    med = lambda v: sorted(v)[len(v) // 2]
    return med(host), med(span) if span else med(host)


def gpu_busy_us(fn, steps=5):
    """Microseconds per call that the GPU spends in kernels (the profiler's CUDA kernel time, summed;
    gaps between kernels excluded), after one unprofiled-warm-up call; 0 on CPU."""
    if DEV != "cuda":
        return 0.0
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile, schedule

    totals = []
    def ready(prof):
        totals.append(sum(getattr(e, "self_device_time_total", 0) or getattr(e, "self_cuda_time_total", 0)
                          for e in prof.key_averages() if e.device_type == DeviceType.CUDA))
    sched = schedule(wait=0, warmup=1, active=steps, repeat=1)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], schedule=sched,
                 on_trace_ready=ready) as prof:
        for _ in range(1 + steps):
            fn()
            sync()
            prof.step()
    return totals[0] / steps if totals else float("nan")


# The ops one backward of an L-layer fused stack calls: the last post's, L - 1 seams', the first pre's four.
def backward_ops(L):
    return {"expand_combine_backward": 1, "post_pre_backward": L - 1, "aggregate_backward (acc)": 1,
            "sinkhorn_backward": 1, "scale_backward": 1, "project_backward (acc)": 1}


def stack_rows(M, C, op_us, L=4):
    """The L-layer identity stack, per layer: host time, GPU span (CUDA events) and GPU busy time
    (profiler kernels) of the forward, the backward alone (retain_graph) and a whole step; then the
    backward's host time against the sum of its ops' host times (op_rows, each called from Python):
    the rest is the autograd engine, the nodes' own work and what the ops' Python calls do not pay."""
    st = mhc.HyperConnectionStack([torch.nn.Identity() for _ in range(L)], 4, C, device=DEV, **CONV)
    x = torch.randn(M, C, 4, device=DEV, dtype=torch.bfloat16, requires_grad=True)
    params = list(st.parameters())
    grad = torch.ones(M, C, 4, device=DEV, dtype=torch.bfloat16)
    out = st(x)
    parts = {
        "forward": lambda: st(x),
        "backward": lambda: torch.autograd.grad(out, [x] + params, grad, retain_graph=True),
        "fwd+bwd": lambda: torch.autograd.grad(st(x), [x] + params, grad),
    }
    print(f"  stack M={M} C={C} L={L}, per layer:")
    for name, fn in parts.items():
        host, span = host_and_span(fn)
        busy = gpu_busy_us(fn)
        bound = ("GPU-bound" if busy >= 0.8 * span else "host-bound" if host >= 0.8 * span
                 else "GPU gaps between queued kernels")
        print(f"    {name:8s} host {host / L:6.1f} us, GPU span {span / L:6.1f} us, GPU busy {busy / L:6.1f} us"
              f"  ({bound})", flush=True)
        if name == "backward":
            ops = sum(op_us[k] * count for k, count in backward_ops(L).items())
            print(f"    backward: its {sum(backward_ops(L).values())} op calls {ops / L:6.1f} us host/layer (from "
                  f"Python); the rest (engine, nodes, minus the ops' Python overhead) {(host - ops) / L:6.1f}")
    return st, x, params, grad


def profile(st, x, params, grad, steps=5):
    from torch.profiler import ProfilerActivity, profile, schedule

    def report(prof):  # at the end of the active steps
        table = prof.key_averages()
        print(table.table(sort_by="self_cpu_time_total", row_limit=25))
        if DEV == "cuda":
            print(table.table(sort_by="self_device_time_total", row_limit=15))
        per_call = [round(e.cpu_time_total, 1) for e in prof.events() if e.name == "mhc::expand_combine_backward"]
        print("mhc::expand_combine_backward per call, us CPU total:", per_call)

    sched = schedule(wait=0, warmup=1, active=steps, repeat=1)  # the warm-up step takes CUPTI's start-up
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if DEV == "cuda" else [])
    with profile(activities=activities, schedule=sched, on_trace_ready=report) as prof:
        for _ in range(1 + steps):
            torch.autograd.grad(st(x), [x] + params, grad)
            sync()
            prof.step()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--M", type=int, default=128)
    ap.add_argument("--C", type=int, default=4096)
    ap.add_argument("--device", default="cuda")
    a = ap.parse_args()
    DEV = a.device
    print(torch.cuda.get_device_name() if DEV == "cuda" else DEV)
    profile(*stack_rows(a.M, a.C, op_rows(a.M, a.C)))
    print(mhc._C.stats())
