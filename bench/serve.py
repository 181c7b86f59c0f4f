"""Same-run benchmark of the layer seam at decode batch sizes (issue 36, part 4).

    python3 bench/serve.py [--te PATH] [--out DIR] [--config M,C ...] [--budget-s S]

The seam is layer l's post step then layer l+1's pre step, forward only (inference). Each column runs
a chain of SEAMS = 8 seams through identity blocks (seam i's y, post, x, P are seam i+1's f, post, x,
P; the same parameters every layer) and is timed two ways:
- graph: the chain captured in one CUDA graph, replayed; CUDA events around each replay (median over
  replays, bench.py's timeit) / SEAMS: the GPU's time per seam without host dispatch;
- eager: the chain called from PyTorch (no grad) back to back, REPEATS chains then one synchronize,
  wall clock / (REPEATS * SEAMS) (median of 5): the sustained time per seam with host dispatch, the
  larger of the host's and the GPU's.

Columns, each with the same inputs and parameters:
- mhc fused: mhc.inference.post_pre into preallocated outputs (out=; one op per seam);
- mhc post_pre: mhc.post_pre, the training API under torch.no_grad (allocates its outputs);
- mhc unfused: mhc.inference.post then mhc.inference.pre (out=; two ops per seam);
- TE: Transformer Engine's Triton mHC kernels (mhc_fused_expand_combine, then
  mhc_generate_mix_and_aggregate), loaded by path from an outside checkout (--te, as bench/bench.py and
  bench/stack.py do; never vendored), "absent" without one;
- torch.compile: bench.py's plain PyTorch version of MATH.md's post then pre as one function,
  torch.compile'd (default options: M becomes dynamic after its second value), and captured in the
  CUDA graph like the others.

Shapes: n = 4 streams, bf16 activations, fp32 mixing and parameters, layout (C, n); M in {1, 4, 16, 64,
128, 256} tokens, C in {4096, 7168}. Conventions are TE's (bench/stack.py's MHC_CONVENTIONS): norm_eps
= FLT_EPSILON, pre_eps = 0, post multiplier 2, log Sinkhorn with 20 iterations, TF32 projection, no
RMSNorm weight, no bias. Each column's first seam is compared with mhc fused's (max |diff| / max |ref|
over x_next, y, post_next, P_next; diff_vs names the column compared with, the first that ran). Writes DIR/serve.json after every configuration and prints the
table last; `bench/report.py merge-serve` puts it into docs/perf/results.json.
"""

import argparse
import concurrent.futures
import gc
import os
import statistics
import subprocess
import sys
import time

import torch

import bench
import mhc
import mhc.inference as mi
import stack

STREAMS = 4
SEAMS = 8
REPEATS = 20
ACT = torch.bfloat16
COLUMNS = ("mhc fused", "mhc post_pre", "mhc unfused", "TE", "torch.compile")
# C = 7168 first: the targets at M = 128 are there (a run past its budget skips the last rows).
CONFIGS = tuple((M, C) for C in (7168, 4096) for M in (1, 4, 16, 64, 128, 256))
# mhc's keywords for TE's conventions (bench/stack.py's, less the module's norm_weight and bias).
CONVENTIONS = {k: v for k, v in stack.MHC_CONVENTIONS.items() if k not in ("norm_weight", "bias")}
# The columns compute the same seam; they differ by bf16 rounding and the projection's TF32 order.
AGREE = 0.05
# Issue 36's targets (H100): graph <= 8 us per seam at M <= 16 and <= 12 us at M = 128, C = 7168;
# eager <= 20 us per seam at M <= 128.
TARGETS = dict(graph_small_m_us=8.0, graph_m128_c7168_us=12.0, eager_us=20.0)


Absent = stack.Absent  # a column that cannot run here (stack.column_row writes its row)


# --- the columns: chain(f, post, x, P, seams) -> the last seam's (x_next, y, post_next, P_next) -----------

def mhc_fused(p, like):
    outs = [mi.empty_post_pre(like, layout="cn") for _ in range(SEAMS)]

    def chain(f, post, x, P, seams=SEAMS):
        for out in outs[:seams]:
            x, f, post, P = mi.post_pre(f, post, x, P, p["phi"], p["alpha"], p["beta"], out=out, **CONVENTIONS)
        return x, f, post, P
    return chain


def mhc_post_pre(p, like):
    def chain(f, post, x, P, seams=SEAMS):
        for _ in range(seams):
            x, f, post, P = mhc.post_pre(f, post, x, P, p["phi"], p["alpha"], p["beta"], **CONVENTIONS)
        return x, f, post, P
    return chain


def mhc_unfused(p, like):
    outs = [(mi.empty_post(like), mi.empty_pre(like, layout="cn")) for _ in range(SEAMS)]

    def chain(f, post, x, P, seams=SEAMS):
        for x_out, pre_out in outs[:seams]:
            x = mi.post(f, post, x, P, out=x_out, layout="cn")
            f, post, P = mi.pre(x, p["phi"], p["alpha"], p["beta"], out=pre_out, **CONVENTIONS)
        return x, f, post, P
    return chain


def te_chain(te, p):
    """TE's post (mhc_fused_expand_combine) then its pre (mhc_generate_mix_and_aggregate), with TE's
    (s, b, ...) shapes as s = 1, b = M; each seam hands TE's own results to the next."""
    beta = p["beta"].view(1, -1)

    def chain(f, post, x, P, seams=SEAMS):
        M, C, n = x.shape
        x, f, post, P = x.view(1, M, C, n), f.view(1, M, C), post.view(1, M, n), P.view(1, M, n, n)
        for _ in range(seams):
            x = te.mhc_fused_expand_combine(f, None, post, x, P, n, True, None)
            f, post, P = te.mhc_generate_mix_and_aggregate(x, p["phi"], p["alpha"], beta, None, True, None)
        return x.reshape(M, C, n), f.reshape(M, C), post.reshape(M, n), P.reshape(M, n, n)
    return chain


def plain_chain(p, compiled):
    """bench.py's plain PyTorch ops: expand_combine, then project, scale, sinkhorn, aggregate of x_next,
    as one function (torch.compile'd when `compiled`)."""
    ops = bench.plain_ops()

    def seam(f, post, x, P, phi, alpha, beta):
        x_next = ops["expand_combine"](f, post, x, P)
        h, ms = ops["project"](x_next, phi)
        pre_w, post_w, logits = ops["scale"](h, ms, alpha, beta, STREAMS)
        return x_next, ops["aggregate"](x_next, pre_w), post_w, ops["sinkhorn"](logits)

    step = torch.compile(seam) if compiled else seam

    def chain(f, post, x, P, seams=SEAMS):
        for _ in range(seams):
            x, f, post, P = step(f, post, x, P, p["phi"], p["alpha"], p["beta"])
        return x, f, post, P
    return chain


def column(name, p, like, te):
    """The named column's chain; raises Absent when it cannot run here. `te`: TE's module, or why there
    is none."""
    if name == "mhc fused":
        return mhc_fused(p, like)
    if name == "mhc post_pre":
        return mhc_post_pre(p, like)
    if name == "mhc unfused":
        return mhc_unfused(p, like)
    if name == "TE":
        if isinstance(te, str):
            raise Absent("no TE checkout (--te)" if te == "absent" else f"Transformer Engine {te}")
        return te_chain(te, p)
    return plain_chain(p, compiled=name == "torch.compile")


# --- measurements ----------------------------------------------------------------------------------

def seam_inputs(M, C, device, seed):
    """Layer l's f, post, x, P (bf16 activations, fp32 mixing; P doubly stochastic-ish, post in (0, 2))."""
    g = torch.Generator(device).manual_seed(seed)
    n = STREAMS
    x = torch.randn(M, C, n, generator=g, device=device).to(ACT)
    f = torch.randn(M, C, generator=g, device=device).to(ACT)
    post = 2 * torch.rand(M, n, generator=g, device=device)
    P = torch.softmax(torch.randn(M, n, n, generator=g, device=device), -2)
    return f, post, x, P


def fused_configs(cs, ms, device):
    """(C, M, p, args, chain) per configuration, C outermost: the layer's parameters (detached), the seam's
    inputs and the "mhc fused" chain over them (the decode probes' setup)."""
    for C in cs:
        p = {k: v.detach() for k, v in stack.layer_params(C, device, seed=100).items()}
        for M in ms:
            args = seam_inputs(M, C, device, seed=1)
            yield C, M, p, args, mhc_fused(p, args[2])


def eager_us(chain, args, device):
    """Per-seam microseconds of REPEATS chains back to back, then one synchronize (median of 5)."""
    cuda = device.type == "cuda"
    repeats = REPEATS if cuda else 2

    def once():
        start = time.perf_counter()
        for _ in range(repeats):
            chain(*args)
        if cuda:
            torch.cuda.synchronize()
        return (time.perf_counter() - start) * 1e6 / (repeats * SEAMS)

    once()
    return statistics.median(once() for _ in range(5))


def graph_us(chain, args):
    """Per-seam microseconds of replaying one CUDA graph of the chain (warmed up on a side stream)."""
    return bench.graph_time(chain, args, reps=50, warmup=5) * 1e3 / SEAMS


def agreement(outs, ref):
    """max over the four results of max |out - ref| / max |ref|."""
    return max(((o.float() - r.float()).abs().max() / r.float().abs().max().clamp_min(1e-30)).item()
               for o, r in zip(outs, ref))


def compile_up_front(configs, device):
    """mhc's kernels for every configuration, compiled (or found in the cache) in parallel before the
    first column runs: the specs depend on C, not M."""
    major, _ = torch.cuda.get_device_capability(device)
    arch = {9: "sm_90a", 10: "sm_100a"}.get(major, "sm_80")
    attrs = (STREAMS, "cn", True, CONVENTIONS["norm_eps"], CONVENTIONS["pre_eps"], CONVENTIONS["post_mult"],
             CONVENTIONS["mode"], CONVENTIONS["iters"], 1e-6)
    specs = set()
    for C in sorted({C for _, C in configs}):
        p = stack.layer_params(C, torch.device("cpu"), seed=100)
        f, post, x, P = seam_inputs(1, C, torch.device("cpu"), seed=1)
        calls = {"post_pre": (f, post, x, P, None, p["phi"], p["alpha"], p["beta"], None, *attrs),
                 "pre": (x, p["phi"], p["alpha"], p["beta"], None, *attrs),
                 "expand_combine": (f, post, x, P, None, STREAMS, "cn")}
        for op, args in calls.items():
            specs.update(mhc._C.requested_specs(op, tuple(a.detach() if isinstance(a, torch.Tensor) else a
                                                          for a in args), arch))
    specs = sorted(s for s in specs if not mhc._C.unsupported_reason(s))
    start = time.perf_counter()
    # One process per spec: the runtime's cache compiles one spec at a time per process (KernelCache's
    # lock), but specs in different processes at once (a file lock per spec); then this process finds
    # them on disk.
    resolve = "import sys, mhc; mhc._C.resolve_kernel(sys.argv[1])"
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 4) as pool:
        runs = list(pool.map(lambda s: subprocess.run([sys.executable, "-c", resolve, s], capture_output=True,
                                                      text=True), specs))
    for spec, run in zip(specs, runs):
        if run.returncode:
            print(f"mhc kernel {spec}: {run.stderr.strip()[-300:]}", flush=True)
    print(f"mhc kernels: {len(specs)} specs in {time.perf_counter() - start:.0f} s", flush=True)


def run_config(M, C, ctx):
    """Every column on one (M, C); returns their rows (absent and failed columns included)."""
    device = ctx["device"]
    key = dict(n=STREAMS, M=M, C=C, seams=SEAMS)
    p = {k: v.detach() for k, v in stack.layer_params(C, device, seed=100).items()}
    args = seam_inputs(M, C, device, seed=1)
    rows, ref, ref_name = [], None, None
    for name in ctx["columns"]:
        def measure():  # its chain goes on return
            nonlocal ref, ref_name
            with torch.no_grad():
                chain = column(name, p, args[2], ctx["te"])
                first = [t.clone() for t in chain(*args, seams=1)]  # also the first call: JIT, compiling
                if ref is None:
                    ref, ref_name = first, name
                row = dict(key, column=name, status="ok", max_rel_diff=agreement(first, ref), diff_vs=ref_name)
                row["eager_us"] = eager_us(chain, args, device)
                row["graph_us"] = graph_us(chain, args) if device.type == "cuda" else None
            return row

        row = stack.column_row(key, name, measure)
        rows.append(row)
        print(line(row), flush=True)
        if device.type == "cuda":
            gc.collect()
            torch.cuda.empty_cache()
    return rows


# --- output ----------------------------------------------------------------------------------------

def us(v):
    return f"{v:.1f}" if v is not None else "-"


def line(r):
    head = f"  M={r['M']:4d} C={r['C']:4d} {r['column']:14s}"
    if r["status"] != "ok":
        return f"{head} {r['status']}"
    return (f"{head} graph {us(r['graph_us']):>7s} eager {us(r['eager_us']):>7s} us/seam;"
            f" diff {r['max_rel_diff']:.1e} vs {r['diff_vs']}{'' if r['max_rel_diff'] <= AGREE else ' (DIFFERS)'};"
            f" {r['wall_s']} s")


def table(rows, columns):
    """The short table: one line per (M, C), each column's graph / eager microseconds per seam."""
    head = f"{'M':>4s} {'C':>5s} " + " ".join(f"{c:>19s}" for c in columns)
    out = [f"us per seam (graph / eager), n = {STREAMS}, {SEAMS} seams per graph", head]
    for M, C in dict.fromkeys((r["M"], r["C"]) for r in rows):
        cells = []
        for c in columns:
            r = next((r for r in rows if (r["M"], r["C"], r["column"]) == (M, C, c)), None)
            if r is None or r["status"] != "ok":
                cells.append(f"{'absent' if r and r['status'].startswith('absent') else 'failed' if r else '-':>19s}")
            else:
                differs = "" if r["max_rel_diff"] <= AGREE else "!"
                cells.append(f"{us(r['graph_us']) + ' / ' + us(r['eager_us']) + differs:>19s}")
        out.append(f"{M:4d} {C:5d} " + " ".join(cells))
    return "\n".join(out)


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--te", default=None, metavar="PATH", help="an outside Transformer Engine checkout")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--config", action="append", default=None, metavar="M,C", help="only these (repeatable)")
    ap.add_argument("--columns", default=None, help="only these columns, comma-separated")
    ap.add_argument("--budget-s", type=float, default=0, help="start no configuration after this many seconds")
    ap.add_argument("--device", default="cuda", help="cuda, or cpu for a smoke run (wall clock, no graphs)")
    ap.add_argument("--no-compile", action="store_true", help="run the plain PyTorch column eagerly")
    return ap.parse_args(argv)


def main(argv=None):
    a = parse_args(argv)
    torch.manual_seed(0)
    device = torch.device(a.device)
    cuda = device.type == "cuda"
    torch.backends.cuda.matmul.allow_tf32 = True  # TE's convention, for the plain column's matmul too
    torch._dynamo.config.cache_size_limit = 64
    te, te_state = stack.load_te(a.te)
    columns = tuple(c for c in COLUMNS if not a.columns or c in a.columns.split(","))
    if a.no_compile:
        columns = tuple("torch eager" if c == "torch.compile" else c for c in columns)
    configs = [tuple(int(v) for v in c.split(",")) for c in a.config] if a.config else CONFIGS
    result = dict(device=torch.cuda.get_device_name() if cuda else "cpu", date=time.strftime("%Y-%m-%d"),
                  te=te_state, te_revision=stack.revision(a.te) if a.te else None, torch=torch.__version__,
                  mhc_revision=stack.revision(os.path.dirname(os.path.abspath(__file__))), seams=SEAMS,
                  columns=list(columns), rows=[], skipped=[],
                  command=" ".join(["python3 bench/serve.py"] + (argv if argv is not None else sys.argv[1:])))
    print(f"device: {result['device']}; Transformer Engine: {te_state}", flush=True)
    ctx = dict(device=device, te=te or te_state, columns=columns)
    os.makedirs(a.out, exist_ok=True)
    start = time.perf_counter()
    if cuda and any(c.startswith("mhc") for c in columns):
        compile_up_front(configs, device)
    stack.run_configs(configs, ("M", "C"), lambda M, C: run_config(M, C, ctx), a, result, start,
                      os.path.join(a.out, "serve.json"))
    print("\n== table\n" + table(result["rows"], columns), flush=True)
    return result


if __name__ == "__main__":
    main()
