"""Where the host time of the M = 128 stack backward goes (issue 34): the 4-layer identity stack's
backward (n = 4 bf16 cn), against the same backward ops called from Python on the main thread and on
another thread (the autograd engine runs CUDA nodes on its own device thread), and against a control
graph of builtin ops with as many nodes; then a chrome trace of a few warm backward steps (and of the
seam forward, eager) for the engine thread's timeline: each op's span and the gaps between them.
Prints tables; with --trace-dir writes the traces there.

    python3 bench/probes/host_breakdown.py [--M 128] [--C 4096] [--seam-C 7168] [--device cpu] [--trace-dir DIR]
    perf record -g python3 bench/probes/host_breakdown.py --loop-s 5   (the backward alone, in a loop)
"""
import argparse
import json
import os
import threading
import time

import torch

import host_timing
import mhc

DEV = "cuda"
CONV = dict(layout="cn", norm_weight=False, bias=False, tf32=True, mode="log", iters=20,
            norm_eps=1.1920929e-07, pre_eps=0.0, post_mult=2.0)
ATTRS = (4, "cn", True, 1.1920929e-07, 0.0, 2.0, "log", 20, 1e-6)
L = 4


def sync():
    if DEV == "cuda":
        torch.cuda.synchronize()


def host_us(fn, calls=20, rounds=7):
    """Median over rounds of host microseconds per call (no sync inside a round)."""
    if DEV == "cpu":  # a smoke run of the code
        calls, rounds = 1, 1
    return host_timing.host_us(fn, calls, rounds, 5 if DEV == "cuda" else 1, DEV == "cuda")


def on_thread(fn):
    """host_us(fn) measured on a fresh Python thread (as the engine's device thread calls the ops)."""
    box = {}
    t = threading.Thread(target=lambda: box.setdefault("us", host_us(fn)))
    t.start()
    t.join()
    return box["us"]


def manual_backward(st, x):
    """The stack backward's op calls in the engine's order, each via torch.ops.mhc from Python, on the
    saved tensors of one forward (the same kernels and shapes the nodes run)."""
    ops, layers = torch.ops.mhc, st.layers
    det = lambda p: p.detach()
    pre0 = ops.pre_saved(x, det(layers[0].phi), det(layers[0].alpha), det(layers[0].beta), None, *ATTRS)
    y, post, P, h, ms, pre, logits = pre0
    seams, xs = [], x
    for l in range(L - 1):
        nxt = layers[l + 1]
        s = ops.post_pre_saved(y, post, xs, P, None, det(nxt.phi), det(nxt.alpha), det(nxt.beta), None, *ATTRS)
        seams.append((y, post, xs, P, s, nxt))
        x_next, h_, ms_, pre_, post, logits_, P, y = s
        xs = x_next
    gout = torch.ones_like(xs)

    def run():
        gf, gpost, gx, gP, _ = ops.expand_combine_backward(gout, y, post, xs, P, None, 4, "cn", None)
        for (f, post_l, x_l, P_l, s, nxt) in reversed(seams):
            x_next, h_, ms_, pre_, _, logits_, _, _ = s
            gx, gf, gpost, gP, *_ = ops.post_pre_backward(
                gx, gf, gpost, gP, f, post_l, x_l, P_l, None, x_next, h_, ms_, pre_, logits_, det(nxt.phi),
                det(nxt.alpha), det(nxt.beta), None, *ATTRS)
        g1, gpre = ops.aggregate_backward(gf, x, pre, 4, "cn", None)
        gl = ops.sinkhorn_backward(gP, logits, 4, "log", 20, 1e-6)
        gh, gms, _, _ = ops.scale_backward(gpre, gpost, gl, h, ms, det(layers[0].alpha), det(layers[0].beta), 4,
                                           *ATTRS[3:6])
        return ops.project_backward(gh, gms, x, det(layers[0].phi), None, 4, "cn", True, g1)
    return run


def control(x, nodes):
    """A graph of `nodes` builtin nodes (one elementwise kernel each way) on x's shape: the engine's
    per-node cost with cheap nodes."""
    w = torch.ones_like(x, requires_grad=True)
    z = x.detach().requires_grad_(True)
    out = z
    for _ in range(nodes):
        out = out * w
    g = torch.ones_like(out)
    return lambda: torch.autograd.grad(out, [z, w], g, retain_graph=True)


def rows(M, C):
    st = mhc.HyperConnectionStack([torch.nn.Identity() for _ in range(L)], 4, C, device=DEV, **CONV)
    x = torch.randn(M, C, 4, device=DEV, dtype=torch.bfloat16, requires_grad=True)
    params = list(st.parameters())
    grad = torch.ones(M, C, 4, device=DEV, dtype=torch.bfloat16)
    out = st(x)
    with torch.no_grad():
        manual = manual_backward(st, x.detach())
    nodes = 2 + (L - 1)  # pre, seams, post
    parts = {
        "forward (grad)": lambda: st(x),
        "backward: autograd.grad, retain_graph": lambda: torch.autograd.grad(out, [x] + params, grad,
                                                                             retain_graph=True),
        "backward: autograd.grad, x only": lambda: torch.autograd.grad(out, [x], grad, retain_graph=True),
        "backward: on the calling thread (no handoff)": "single",
        "backward ops from Python, main thread": manual,
        "backward ops from Python, other thread": None,
        f"control: {nodes} mul nodes, autograd.grad": control(x.detach(), nodes),
        f"control: {4 * nodes} mul nodes, autograd.grad": control(x.detach(), 4 * nodes),
    }
    print(f"M={M} C={C} L={L}: host us per call (per layer in brackets)")
    for name, fn in parts.items():
        if fn == "single":  # the engine's device-thread handoff left out
            with torch.autograd.set_multithreading_enabled(False):
                us = host_us(parts["backward: autograd.grad, retain_graph"])
        else:
            us = on_thread(manual) if fn is None else host_us(fn)
        print(f"  {name:44s} {us:8.1f}  ({us / L:6.1f})", flush=True)
    return st, x, params, grad, out, manual


def top_level(events):
    """Complete events that no other event on the same thread contains, sorted by start."""
    by_tid = {}
    for e in events:
        if e.get("ph") == "X" and not e["name"].startswith("ProfilerStep") and e.get("cat") in ("cpu_op", "user_annotation", "cuda_runtime", "cuda_driver"):
            by_tid.setdefault(e["tid"], []).append(e)
    out = {}
    for tid, evs in by_tid.items():
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        tops, end = [], -1.0
        for e in evs:
            if e["ts"] >= end:
                tops.append(e)
                end = e["ts"] + e["dur"]
        out[tid] = tops
    return out


def summarize(path, label):
    """Per thread: the top-level events of the trace with their spans and the gaps before them."""
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    for tid, tops in top_level(events).items():
        if len(tops) < 2:
            continue
        t0 = tops[0]["ts"]
        busy = sum(e["dur"] for e in tops)
        span = tops[-1]["ts"] + tops[-1]["dur"] - t0
        print(f"  {label} thread {tid}: {len(tops)} top-level events, busy {busy:.1f} us of {span:.1f} us")
        prev_end = t0
        for e in tops[:60]:
            print(f"    +{e['ts'] - t0:9.1f} gap {e['ts'] - prev_end:7.1f}  {e['dur']:8.1f} us  {e['name'][:70]}")
            prev_end = e["ts"] + e["dur"]


def trace(fn, path, steps=3):
    from torch.profiler import ProfilerActivity, profile, schedule
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if DEV == "cuda" else [])
    sched = schedule(wait=0, warmup=2, active=steps, repeat=1)
    with profile(activities=activities, schedule=sched,
                 on_trace_ready=lambda p: p.export_chrome_trace(path)) as prof:
        for _ in range(2 + steps):
            fn()
            sync()
            prof.step()


def traces(st, x, params, grad, out, manual, C, trace_dir):
    os.makedirs(trace_dir, exist_ok=True)
    bwd = os.path.join(trace_dir, "stack_backward.json")
    trace(lambda: torch.autograd.grad(out, [x] + params, grad, retain_graph=True), bwd)
    summarize(bwd, "stack backward")
    man = os.path.join(trace_dir, "manual_backward.json")
    trace(manual, man, steps=1)
    summarize(man, "backward ops from Python")
    hc = mhc.HyperConnection(4, C, device=DEV, **CONV)
    M = x.shape[0]
    f = torch.randn(M, C, device=DEV, dtype=torch.bfloat16)
    xs = torch.randn(M, C, 4, device=DEV, dtype=torch.bfloat16)
    state = (torch.rand(M, 4, device=DEV), xs, torch.rand(M, 4, 4, device=DEV))
    fwd = os.path.join(trace_dir, "seam_forward.json")

    def seams():
        with torch.no_grad():
            for _ in range(4):
                hc.post_pre(f, state, hc)
    trace(seams, fwd, steps=1)
    summarize(fwd, "seam forward (no_grad)")


def loop(M, C, seconds):
    try:  # let a sampler that is not this process's parent (gdb -p) attach under ptrace_scope 1
        import ctypes
        ctypes.CDLL(None).prctl(0x59616D61, ctypes.c_ulong(-1), 0, 0, 0)  # PR_SET_PTRACER, ANY
    except (OSError, AttributeError):
        pass
    st = mhc.HyperConnectionStack([torch.nn.Identity() for _ in range(L)], 4, C, device=DEV, **CONV)
    x = torch.randn(M, C, 4, device=DEV, dtype=torch.bfloat16, requires_grad=True)
    params, out = list(st.parameters()), st(x)
    grad = torch.ones_like(out)
    end, calls = time.perf_counter() + seconds, 0
    while time.perf_counter() < end:
        for _ in range(20):
            torch.autograd.grad(out, [x] + params, grad, retain_graph=True)
        sync()
        calls += 20
    print(f"loop: {calls} backward calls in {seconds} s")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--M", type=int, default=128)
    ap.add_argument("--C", type=int, default=4096)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--seam-C", type=int, default=7168, help="C of the traced seam forward")
    ap.add_argument("--trace-dir", default=None)
    ap.add_argument("--loop-s", type=float, default=0,
                    help="only run the stack backward for this many seconds (for an outside profiler: perf)")
    a = ap.parse_args()
    DEV = a.device
    print(torch.cuda.get_device_name() if DEV == "cuda" else DEV)
    if a.loop_s:
        loop(a.M, a.C, a.loop_s)
        raise SystemExit(0)
    r = rows(a.M, a.C)
    if a.trace_dir:
        traces(*r, a.seam_C, a.trace_dir)
    print(mhc._C.stats())
