"""Same-run benchmark of mHC on one GPU: mhc, torch.compile of a plain PyTorch
version of MATH.md, and Transformer Engine's Triton kernels.

    python3 bench/bench.py [--te PATH] [--out DIR] [--quick]

--te PATH: an outside Transformer Engine checkout (its files
transformer_engine/{common,pytorch}/triton/mhc.py are loaded by path, with a
small stand-in for TE's general_gemm); without it the TE column says "absent".
Never vendored here.

Method: CUDA events around each call, median of many runs after warm-up; when
the inputs are smaller than 4x the L2 cache, calls rotate over several input
sets. From M = 4096 tokens each call is queued behind a GPU spin, so the
events time the GPU's work for it rather than the host's latency to its first
launch (--timing; see QUEUED_TOKENS). Backward = (forward+backward) - forward, through autograd, for every
column. % SOL = IO bytes / the measured device-to-device copy bandwidth (read +
write). Conventions are TE's (layout (C, n), norm_eps = FLT_EPSILON, pre_eps = 0,
log Sinkhorn, 20 iterations, TF32 projection) so all columns compute the same.
Writes DIR/perf.json and prints the table; bench/report.py turns it into docs/PERFORMANCE.md.
"""

import argparse
import importlib.util
import json
import math
import os
import statistics
import subprocess
import sys
import time
import types

import torch

import mhc

FLT_EPS = torch.finfo(torch.float32).eps
DEV = "cuda"


# --- timing --------------------------------------------------------------------

def l2_bytes():
    return torch.cuda.get_device_properties(0).L2_cache_size


# Calls with at least this many tokens are timed queued behind GPU work
# (--timing auto): the events then bracket the GPU's work for the call, as
# in a training step where the host runs ahead, not the host's latency to the
# first launch from an idle GPU (25-65 us for one op from Python on the H100
# machine; the dispatch table reports host costs). Smaller calls (M = 128,
# where the target is a call from PyTorch) start from an idle GPU.
QUEUED_TOKENS = 4096
# ~1.7 ms at H100 clocks: longer than the host takes to enqueue any one call
# here; if it were not, the excess host time would count (never less).
AHEAD_CYCLES = 3_000_000
TIMING = "auto"


def queued(M):
    return TIMING == "queued" or (TIMING == "auto" and M >= QUEUED_TOKENS)


def timeit(fn, sets, reps=30, warmup=5, ahead=False):
    """Median milliseconds of fn(*args) over `reps` calls, rotating input sets;
    with `ahead`, each call is enqueued behind a GPU spin (torch.cuda._sleep)."""
    for i in range(warmup):
        fn(*sets[i % len(sets)])
    # The events exist before the timed calls: torch creates a CUDA event at
    # its first record, and the end event's creation would otherwise fall
    # inside the interval (about 4 us of host time on the H100 machine, which
    # an idle-timed call cannot hide).
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for a, b in events:
        a.record()
        b.record()
    torch.cuda.synchronize()
    times = []
    for i in range(reps):
        args = sets[i % len(sets)]
        a, b = events[i]
        if ahead:
            torch.cuda._sleep(AHEAD_CYCLES)
        a.record()
        fn(*args)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def wall_timeit(fn, sets, reps=30, warmup=5, ahead=False):
    """timeit's CPU counterpart (wall clock; `ahead` has no meaning there), so
    the harnesses run on CPU too (test/python/test_bench_stack.py)."""
    for i in range(warmup):
        fn(*sets[i % len(sets)])
    times = []
    for i in range(reps):
        t = time.perf_counter()
        fn(*sets[i % len(sets)])
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def timer(device=DEV):
    """The timing function for tensors on `device`: CUDA events, else wall clock."""
    return timeit if torch.device(device).type == "cuda" else wall_timeit


def copy_bandwidth(device=DEV, n=1 << 30):
    """Device-to-device copy rate of n bytes, read + write, in bytes per second."""
    src = torch.empty(n, dtype=torch.uint8, device=device).random_(0, 255)
    dst = torch.empty_like(src)
    ms = timer(device)(lambda: dst.copy_(src), [()], reps=20, ahead=TIMING != "idle")
    return 2 * n / (ms * 1e-3)


# --- the three implementations -----------------------------------------------

def plain_ops():
    """MATH.md written plainly in PyTorch (fp32 math), for torch.compile."""
    def project(x, phi):
        xv = x.reshape(x.shape[0], -1).float()
        return xv @ phi.t(), (xv * xv).mean(-1)

    def scale(h, ms, alpha, beta, n):
        r = torch.rsqrt(ms + FLT_EPS)[:, None]
        seg = torch.cat([alpha[0].expand(n), alpha[1].expand(n), alpha[2].expand(n * n)])
        z = seg * h * r + beta
        return torch.sigmoid(z[:, :n]), 2 * torch.sigmoid(z[:, n:2 * n]), z[:, 2 * n:].reshape(-1, n, n)

    def sinkhorn(L):
        f = torch.zeros_like(L[..., 0])
        g = torch.zeros_like(L[..., 0, :])
        for _ in range(20):
            f = -torch.logsumexp(L + g[:, None, :], -1)
            g = -torch.logsumexp(L + f[:, :, None], -2)
        return torch.exp(f[:, :, None] + L + g[:, None, :])

    # Broadcast-multiply-reduce rather than einsum, so inductor fuses each op
    # into one pass over x instead of upcasting x to fp32 in memory first.
    def aggregate(x, pre):
        return (x.float() * pre[:, None, :]).sum(-1).to(x.dtype)

    def expand_combine(f, post, x, P):
        mix = (x.float()[:, :, :, None] * P[:, None, :, :]).sum(-2)
        return (f.float()[:, :, None] * post[:, None, :] + mix).to(x.dtype)

    return dict(project=project, scale=scale, sinkhorn=sinkhorn, aggregate=aggregate,
                expand_combine=expand_combine)


def mhc_ops():
    def project(x, phi):
        return mhc.ops.project(x, phi, layout="cn", tf32=True)

    def scale(h, ms, alpha, beta, n):
        return mhc.ops.scale(h, ms, alpha, beta, norm_eps=FLT_EPS, pre_eps=0.0)

    def sinkhorn(L):
        return mhc.ops.sinkhorn(L, mode="log", iters=20)

    def aggregate(x, pre):
        return mhc.ops.aggregate(x, pre, layout="cn")

    def expand_combine(f, post, x, P):
        return mhc.ops.expand_combine(f, post, x, P, layout="cn")

    # The layer through mhc's own pre step: one call for the four ops.
    def pre(x, phi, alpha, beta, n):
        return mhc.ops.pre(x, phi, alpha, beta, layout="cn", tf32=True, norm_eps=FLT_EPS, pre_eps=0.0, mode="log",
                           iters=20)

    return dict(project=project, scale=scale, sinkhorn=sinkhorn, aggregate=aggregate,
                expand_combine=expand_combine, pre=pre)


def te_module(path):
    """transformer_engine.pytorch.triton.mhc of the checkout at `path`, loaded by
    file path with a stand-in for general_gemm (TE's package is not imported)."""
    def load(name, rel):
        spec = importlib.util.spec_from_file_location(name, os.path.join(path, rel))
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module

    for pkg in ("transformer_engine", "transformer_engine.common", "transformer_engine.common.triton",
                "transformer_engine.pytorch", "transformer_engine.pytorch.triton",
                "transformer_engine.pytorch.cpp_extensions"):
        sys.modules.setdefault(pkg, types.ModuleType(pkg))
    gemm = types.ModuleType("transformer_engine.pytorch.cpp_extensions.gemm")
    # general_gemm(A, B, out_dtype, layout="NT")[0] = B^T A (cuBLAS in TE).
    gemm.general_gemm = lambda A, B, out_dtype=None, layout="NT", **kw: ((B.t() @ A).to(out_dtype),)
    sys.modules[gemm.__name__] = gemm
    load("transformer_engine.common.triton.mhc", "transformer_engine/common/triton/mhc.py")
    return load("transformer_engine.pytorch.triton.mhc", "transformer_engine/pytorch/triton/mhc.py")


def load_te(path):
    """TE's Triton mHC ops by path (te_module), in the columns' calling convention."""
    te = te_module(path)

    def project(x, phi):
        s, b, C, n = x.shape if x.dim() == 4 else (x.shape[0], 1, x.shape[1], x.shape[2])
        H, ms = te.mhc_fused_projection(x.reshape(s * b, C * n), phi, use_tf32=True)
        return H, ms

    def scale(h, ms, alpha, beta, n):
        return te.mhc_fused_scale(h, alpha, beta.view(1, -1), ms, n)

    def sinkhorn(L):
        return te.mhc_fused_sinkhorn(L[None], L.shape[-1])[0]

    def aggregate(x, pre):
        return te.mhc_fused_aggregate(x[None], pre[None], x.shape[-1])[0]

    def expand_combine(f, post, x, P):
        return te.mhc_fused_expand_combine(f[None], None, post[None], x[None], P[None], x.shape[-1])[0]

    return dict(project=project, scale=scale, sinkhorn=sinkhorn, aggregate=aggregate,
                expand_combine=expand_combine)


# --- inputs, IO bytes ----------------------------------------------------------

def make_set(M, n, C, dtype=torch.bfloat16):
    N, K = 2 * n + n * n, n * C
    g = lambda *s: torch.randn(*s, device=DEV)
    x = g(M, C, n).to(dtype)
    phi = g(N, K) / math.sqrt(K)
    h32 = g(M, max(N, 32))  # TE's projection output is padded to 32 columns
    return dict(x=x, phi=phi, h=h32[:, :N].contiguous(), h32=h32, ms=torch.rand(M, device=DEV) + 0.5, alpha=torch.rand(3, device=DEV),
                beta=0.1 * g(N), L=2 * g(M, n, n), pre=torch.rand(M, n, device=DEV),
                post=2 * torch.rand(M, n, device=DEV), P=torch.softmax(g(M, n, n), -1), f=g(M, C).to(dtype))


def args_of(op, s, n, impl=""):
    return {"project": (s["x"], s["phi"]),
            "scale": (s["h32"] if impl == "TE" else s["h"], s["ms"], s["alpha"],
                      s["beta"].view(1, -1) if impl == "TE" else s["beta"], n),
            "sinkhorn": (s["L"],),
            "aggregate": (s["x"], s["pre"]),
            "expand_combine": (s["f"], s["post"], s["x"], s["P"]),
            "pre": (s["x"], s["phi"], s["alpha"], s["beta"], n)}[op]


def io_bytes(op, d, M, n, C, a=2):
    """Fewest bytes moved (each input read once, output written once); act dtype a bytes."""
    N, K = 2 * n + n * n, n * C
    if op == "project":
        return M * (a * K + 4 * N + 4) + 4 * N * K if d == "fwd" else M * (2 * a * K + 4 * N + 4) + 8 * N * K
    if op == "aggregate":
        return M * (a * K + a * C + 4 * n) if d == "fwd" else M * (a * C + 2 * a * K + 8 * n)
    if op == "expand_combine":
        return (M * (a * C + 2 * a * K + 4 * (n + n * n)) if d == "fwd"
                else M * (2 * a * K + a * C + a * K + a * C + 8 * (n + n * n)))
    return None  # scale, sinkhorn: a few bytes per token; latency-bound


# --- measurements --------------------------------------------------------------

def measure(impl, op, M, n, C, bw, sets_fwd):
    fn = impl[op]

    def fwd(*a):
        return fn(*a)

    def fwd_bwd(*a):
        out = fn(*a)
        outs = [o for o in (out if isinstance(out, (tuple, list)) else (out,)) if o.requires_grad]
        leaves = [t for t in a if isinstance(t, torch.Tensor) and t.requires_grad]
        # autograd.grad, not backward(): accumulating into .grad would add a
        # read and a write of every input gradient to each column's time.
        torch.autograd.grad(outs, leaves, grads_like(outs))

    fwd_ms = timeit(fwd, sets_fwd, ahead=queued(M))
    bwd_sets = [tuple(t.detach().requires_grad_() if isinstance(t, torch.Tensor) and t.is_floating_point() else t
                      for t in s) for s in sets_fwd]
    both_ms = timeit(fwd_bwd, bwd_sets, reps=20, ahead=queued(M))
    return fwd_ms, max(both_ms - fwd_ms, 0.0)


_GRADS = {}


def graph_time(fn, args, **timeit_options):
    """Median milliseconds of replaying a CUDA graph of fn(*args) (forward; warmed up on a side
    stream); timeit_options go to timeit (reps, warmup)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn(*args)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn(*args)
    return timeit(graph.replay, [()], **timeit_options)


def grads_like(outs):
    """One fixed random gradient per (shape, dtype, device) of the outputs."""
    key = tuple((o.shape, o.dtype, o.device) for o in outs)
    if key not in _GRADS:
        _GRADS[key] = [torch.randn(o.shape, device=o.device, dtype=o.dtype) for o in outs]
    return _GRADS[key]


def layer(impl, s, n):
    x, phi, alpha, beta = s["x"], s["phi"], s["alpha"], s["beta"]
    if "pre" in impl:
        y, post, P = impl["pre"](x, phi, alpha, beta, n)
        return impl["expand_combine"](y, post, x, P)
    h, ms = impl["project"](x, phi)
    pre, post, L = impl["scale"](h, ms, alpha, beta, n)
    P = impl["sinkhorn"](L.reshape(-1, n, n))
    y = impl["aggregate"](x, pre)
    return impl["expand_combine"](y, post, x, P)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--te", default=None, help="path of a Transformer Engine checkout")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--quick", action="store_true", help="one shape, for a smoke run")
    ap.add_argument("--shape", action="append", default=None, metavar="n,M,C",
                    help="only these shapes (repeatable)")
    ap.add_argument("--ops", default=None, help="only these ops, comma-separated (project, ..., layer)")
    ap.add_argument("--impls", default=None, help="only these columns, comma-separated (mhc, torch.compile, TE)")
    ap.add_argument("--no-extras", action="store_true", help="skip the dispatch and cold-JIT measurements")
    ap.add_argument("--timing", choices=("auto", "idle", "queued"), default="auto",
                    help=f"start each timed call from an idle GPU, or queued behind GPU work (auto: queued "
                         f"from M = {QUEUED_TOKENS}; the copy bandwidth is queued unless idle)")
    a = ap.parse_args()
    global TIMING
    TIMING = a.timing
    torch.manual_seed(0)
    dev = torch.cuda.get_device_name()
    bw = copy_bandwidth()
    print(f"device: {dev}; copy bandwidth {bw / 1e12:.2f} TB/s (read + write)")
    # The convention is a TF32 projection, for torch.compile's matmul too.
    # Static shapes: one specialisation per configuration, as a user would
    # get (dynamic=True generated much slower code here).
    torch.backends.cuda.matmul.allow_tf32 = True
    torch._dynamo.config.cache_size_limit = 64
    impls = {"mhc": mhc_ops(), "torch.compile": {k: torch.compile(v, dynamic=False) for k, v in plain_ops().items()}}
    te_state = "absent"
    if a.te:
        try:
            impls["TE"] = load_te(a.te)
            te_state = "loaded"
        except Exception as e:  # an incompatible checkout is reported, not fatal
            te_state = f"failed to load: {e!r}"
    print(f"Transformer Engine: {te_state}")
    shapes = [(4, 128, 4096), (4, 8192, 4096), (4, 32768, 4096), (4, 128, 7168), (4, 8192, 7168),
              (4, 32768, 7168), (8, 8192, 4096), (8, 32768, 7168)]
    if a.quick:
        shapes = [(4, 8192, 4096)]
    if a.shape:
        shapes = [tuple(int(v) for v in sh.split(",")) for sh in a.shape]
    ops = ("project", "scale", "sinkhorn", "aggregate", "expand_combine", "layer")
    if a.ops:
        ops = tuple(a.ops.split(","))
    if a.impls:
        impls = {k: v for k, v in impls.items() if k in a.impls.split(",")}
    rows = []
    os.makedirs(a.out, exist_ok=True)

    def write(dispatch, cold):  # after every shape too, so a cut-off run keeps what it measured
        result = dict(device=dev, date=time.strftime("%Y-%m-%d"), copy_bandwidth=bw, te=te_state, rows=rows,
                      dispatch_us=dispatch, cold_compile_s=cold, command=" ".join(sys.argv))
        with open(os.path.join(a.out, "perf.json"), "w") as f:
            json.dump(result, f, indent=1)

    start = time.perf_counter()
    for n, M, C in shapes:
        print(f"shape n={n} M={M} C={C} at {time.perf_counter() - start:.0f} s", flush=True)
        s0 = make_set(M, n, C)
        per_set = sum(t.numel() * t.element_size() for t in s0.values() if isinstance(t, torch.Tensor))
        sets = [s0] + [make_set(M, n, C) for _ in range(3 if per_set < 4 * l2_bytes() else 0)]
        for op in ops:
            for name, impl in impls.items():
                if name == "TE" and n != 4:
                    continue
                try:
                    if op == "layer":
                        fn = {"layer": lambda x, phi, alpha, beta, impl=impl: layer(
                            impl, dict(x=x, phi=phi, alpha=alpha, beta=beta), n)}
                        fsets = [(t["x"], t["phi"], t["alpha"], t["beta"]) for t in sets]
                        f_ms, b_ms = measure(fn, "layer", M, n, C, bw, fsets)
                    else:
                        f_ms, b_ms = measure(impl, op, M, n, C, bw, [args_of(op, t, n, name) for t in sets])
                except Exception as e:
                    print(f"  {name} {op} n={n} M={M} C={C}: {e!r}"[:300])
                    continue
                row = dict(impl=name, op=op, n=n, M=M, C=C, fwd_us=f_ms * 1e3, bwd_us=b_ms * 1e3,
                           timing="queued" if queued(M) else "idle")
                for d, t in (("fwd", f_ms), ("bwd", b_ms)):
                    io = io_bytes(op, d, M, n, C)
                    row[f"{d}_sol"] = (io / (t * 1e-3)) / bw if io and t > 0 else None
                rows.append(row)
                print(f"  n={n} M={M:5d} C={C} {op:15s} {name:14s} fwd {f_ms * 1e3:9.1f} us  bwd {b_ms * 1e3:9.1f} us"
                      + (f"  SOL fwd {row['fwd_sol']:.0%} bwd {row['bwd_sol']:.0%}" if row.get("fwd_sol") else ""),
                      flush=True)
                if op == "layer" and M <= 1024:
                    # Small layers are host-bound; a CUDA graph replays the
                    # same kernels without the per-op host work.
                    try:
                        g_ms = graph_time(fn["layer"], fsets[0])
                    except Exception as e:
                        print(f"  {name} layer (CUDA graph) n={n} M={M} C={C}: {e!r}"[:300])
                        continue
                    rows.append(dict(impl=name, op="layer_graph", n=n, M=M, C=C, fwd_us=g_ms * 1e3, bwd_us=0.0))
                    print(f"  n={n} M={M:5d} C={C} {'layer (graph)':15s} {name:14s} fwd {g_ms * 1e3:9.1f} us", flush=True)
        del sets, s0
        torch.cuda.empty_cache()
        write({}, {})
    print(f"rows done at {time.perf_counter() - start:.0f} s", flush=True)
    dispatch = {} if a.no_extras else dispatch_overhead()
    cold = {} if a.no_extras else cold_compile_times()
    write(dispatch, cold)
    print(f"host dispatch per op (M=1, warm): {dispatch}")
    print(f"cold JIT compile per kernel (s): {cold}")


def dispatch_overhead(calls=2000):
    """Host microseconds per warm call (tiny inputs, no sync in the loop)."""
    out = {}
    impl = mhc_ops()
    x = torch.randn(1, 64, 4, device=DEV, dtype=torch.bfloat16)
    pre = torch.rand(1, 4, device=DEV)
    L = torch.randn(1, 4, 4, device=DEV)
    y = torch.randn(1, 64, device=DEV, dtype=torch.bfloat16)
    phi, alpha, beta = torch.randn(24, 256, device=DEV) / 16, torch.rand(3, device=DEV), torch.zeros(24, device=DEV)
    for name, fn in (("torch.empty_like (an allocation, no launch)", lambda: torch.empty_like(y)),
                     ("torch.mul (a native op, the floor)", lambda: torch.mul(y, y)),
                     ("torch.ops.mhc.aggregate", lambda: torch.ops.mhc.aggregate(x, pre, 4, "cn")),
                     ("torch.ops.mhc.sinkhorn", lambda: torch.ops.mhc.sinkhorn(L, 4, "log", 20, 0.0)),
                     ("mhc.aggregate (Python API)", lambda: mhc.aggregate(x, pre, layout="cn")),
                     ("mhc.sinkhorn (Python API)", lambda: mhc.sinkhorn(L, mode="log", iters=20, eps=0.0)),
                     ("torch.ops.mhc.pre (4 ops fused; 2 launches at M <= 128, else 3)", lambda: torch.ops.mhc.pre(
                         x, phi, alpha, beta, None, 4, "cn", True, FLT_EPS, 0.0, 2.0, "log", 20, 0.0)),
                     ("layer: mhc.pre + mhc.post (3 launches at M = 1)", lambda: layer(
                         impl, dict(x=x, phi=phi, alpha=alpha, beta=beta), 4))):
        for _ in range(50):
            fn()
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        host = (time.perf_counter() - t) / calls * 1e6
        torch.cuda.synchronize()
        out[name] = round(host, 2)
    return out


def cold_compile_times(repeats=3):
    """Wall seconds of mhc-compile (a cold JIT: PTX and cubin) for every kernel of
    the n = 4 and n = 8 bf16 C = 7168 layer, `repeats` times each: the median and
    the slowest."""
    compiler = os.environ.get("MHC_COMPILER", "mhc-compile")
    arch = "sm_90a"
    specs = []
    for n in (4, 8):
        for d in ("fwd", "bwd"):
            specs += [f"project.{d};n={n};act=bf16;param=f32;layout=cn;C=7168;tf32=1;weight=0;arch={arch}",
                      f"scale.{d};n={n};param=f32;norm_eps=1.1920929e-07;pre_eps=0;post_mult=2;arch={arch}",
                      f"sinkhorn.{d};n={n};mode=log;iters=20;arch={arch}",
                      f"aggregate.{d};n={n};act=bf16;layout=cn;C=7168;arch={arch}",
                      f"expand_combine.{d};n={n};act=bf16;layout=cn;C=7168;bias=0;arch={arch}"]
        specs.append(f"pre.fwd;n={n};act=bf16;param=f32;layout=cn;C=7168;tf32=1;weight=0;norm_eps=1.1920929e-07;"
                     f"pre_eps=0;post_mult=2;mode=log;iters=20;arch={arch}")
    out = {}
    for s in specs:
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            r = subprocess.run([compiler, "--spec", s, "-o", "/tmp/mhc-cold"], capture_output=True, text=True)
            if r.returncode != 0:
                times = f"failed: {r.stderr[-200:]}"
                break
            times.append(time.perf_counter() - t)
        key = s.split(";")[0] + " n=" + s.split(";")[1].split("=")[1]
        out[key] = times if isinstance(times, str) else dict(median=round(statistics.median(times), 3),
                                                            max=round(max(times), 3))
    return out


if __name__ == "__main__":
    main()
