"""Same-run benchmark of a 4-layer mHC stack (issue 34, parts 5 and 6).

    python3 bench/stack.py [--te PATH] [--out DIR] [--config BLOCK,M,C ...] [--budget-s S]

Columns, each the same 4-layer stack with the same parameters and blocks:
- mhc fused: mhc.HyperConnectionStack(blocks, n, C, fused=True) (one seam op per layer boundary);
- mhc unfused: the same with fused=False (the per-layer HyperConnection path);
- TE, TE acc buffer: Transformer Engine's Triton mHC kernels (mhc_generate_mix_and_aggregate, then the
  block, then mhc_fused_expand_combine per layer), by default and with an fp32 fused_grad_x_acc_buffer
  per layer; loaded by path from an outside checkout (--te, as bench/bench.py does; never vendored),
  "absent" without one;
- mhc.te, mhc.te acc buffer: the TE columns' layer written against mhc.te (mhc's drop-in for TE's module):
  without and with the fp32 buffer (x's gradient accumulated in the backward kernels, acc=f32; the fused
  pre step's forward either way): the pair says whether the buffer path is faster than mhc without it;
- torch.compile: bench.py's plain PyTorch version of MATH.md, its pre step and its post step each
  compiled (static shapes), the block between them eager.

Shapes: n = 4 streams, bf16 activations, fp32 mixing and parameters, layout (C, n); M = 32768 tokens
with C = 7168 and 4096, and M = 128 with C = 4096 (host overhead). Blocks: `identity`, and `linear`,
a bf16 nn.Linear(C, C, bias=False) per layer (a small real block: its weight's gradient and a real f).
Conventions are TE's, as in bench.py: norm_eps = FLT_EPSILON, pre_eps = 0, post multiplier 2, log
Sinkhorn with 20 iterations, TF32 projection, no RMSNorm weight, no bias.

Per layer (the stack's time / 4): forward (with autograd recording, as in training), backward
((forward + backward) - forward, through torch.autograd.grad of x and every parameter), timed with
bench.py's timeit (CUDA events, medians; from M = 4096 each call queued behind a GPU spin). % floor =
the seam's fewest bytes / the measured copy bandwidth / the time: forward (3n + 2)*2*M*C bytes,
backward (3n + 3)*2*M*C (docs/design/seam.md); with the linear block the block's own time (measured
alone) is taken off first. Memory: saved = the distinct storages autograd saves for backward
(saved_tensors_hooks; parameters left out) per layer; held = what the forward leaves allocated besides
its output, per layer (also tensors kept outside autograd's saved tensors, such as TE's buffer); peak =
torch.cuda.max_memory_allocated over one forward + backward of the stack, above what was allocated
before it. After each column its log line says what it left: tensors it created that are still alive
(LEFT ALIVE, a leak: the next column would lack that memory; test_bench_stack.py checks there are none);
on CUDA a line follows with torch.cuda.memory_allocated() once the column is gone (the next starts there).
Writes DIR/stack.json after every configuration and prints the table last;
`bench/report.py merge-stack` puts it into docs/perf/results.json.
"""

import argparse
import gc
import json
import math
import os
import subprocess
import sys
import time
import traceback

import torch
from torch import nn

import bench
import mhc

LAYERS = 4
STREAMS = 4
ACT = torch.bfloat16
COLUMNS = ("mhc fused", "mhc unfused", "TE", "TE acc buffer", "mhc.te", "mhc.te acc buffer", "torch.compile")
NAME_W = max(len(c) for c in COLUMNS)  # the table's column-name width
CONFIGS = (("identity", 32768, 7168), ("identity", 32768, 4096), ("identity", 128, 4096),
           ("linear", 32768, 7168), ("linear", 32768, 4096), ("linear", 128, 4096))
# TE's conventions in HyperConnection's keywords (bench.py's columns use the same).
MHC_CONVENTIONS = dict(layout="cn", norm_weight=False, bias=False, tf32=True, mode="log", iters=20,
                       norm_eps=bench.FLT_EPS, pre_eps=0.0, post_mult=2.0)
MIB = 1 << 20
# Columns agree to bf16 rounding over 4 layers (~1e-2 of the output's largest value); a convention
# that differs (pre_eps, post multiplier, layout) moves the output by tens of percent.
AGREE = 0.05


class Absent(Exception):
    """A column that cannot run here; its row says why."""


def column_row(key, name, measure):
    """measure()'s row of the column `name`, or, when it raises, the column's absent or failed row (a failing
    column's traceback goes to the log; the other columns still run); with the wall seconds it took.
    (bench/serve.py uses it too.)"""
    start = time.perf_counter()
    try:
        row = measure()
    except Absent as e:
        row = dict(key, column=name, status=f"absent: {e}")
    except Exception as e:
        traceback.print_exc(file=sys.stdout)
        row = dict(key, column=name, status=f"failed: {e!r}"[:400])
    row["wall_s"] = round(time.perf_counter() - start, 1)
    return row


# --- the floor and memory accounting ----------------------------------------------

def floor_bytes(n, M, C, act_bytes=2):
    """The seam's fewest bytes per layer (issue 34): forward reads x_l and f_l, writes x_{l+1}, reads
    it again and writes y; backward reads gx_{l+1}, gy, f_l, x_l and writes gx_l, gf_l."""
    fwd, bwd = (3 * n + 2) * act_bytes * M * C, (3 * n + 3) * act_bytes * M * C
    return dict(fwd=fwd, bwd=bwd, total=fwd + bwd)


def floor_fraction(nbytes, bandwidth, us):
    """Moving nbytes at the copy bandwidth over the measured time (1.0 = the floor); None without a time."""
    return nbytes / bandwidth / (us * 1e-6) if us and us > 0 else None


def storage_key(t):
    return (str(t.device), t.untyped_storage().data_ptr())


def saved_storage_bytes(fn, exclude=()):
    """(fn(), bytes): the distinct storages autograd saves for backward while fn runs, each counted
    once however many tensors (views, repeats) share it; storages of `exclude` (parameters) left out."""
    skip = {storage_key(t) for t in exclude}
    seen = {}

    def pack(t):
        key = storage_key(t)
        if key not in skip:
            seen[key] = t.untyped_storage().nbytes()
        # Detached: the hook gets the live tensor, and a saved output kept with its grad_fn would
        # make a cycle through C++ (node -> saved tensor -> grad_fn -> node) that gc.collect() never
        # frees when no backward runs (pytorch/pytorch#115255): each column leaked its whole graph.
        return t.detach()

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return out, sum(seen.values())


def memory(run, leaves, x):
    """Saved, held and peak bytes of one forward + backward of the stack (held and peak on CUDA only)."""
    cuda = x.device.type == "cuda"
    out, saved = saved_storage_bytes(lambda: run(x), exclude=leaves)
    del out
    held = peak = None
    if cuda:
        gc.collect()  # what the hooked forward left in reference cycles
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        out = run(x)
        torch.cuda.synchronize()
        held = torch.cuda.memory_allocated() - base - out.untyped_storage().nbytes()
        grads = torch.autograd.grad([out], [x] + leaves, bench.grads_like([out]))
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - base
        del grads, out
    return dict(saved_bytes=saved / LAYERS, held_bytes=held / LAYERS if cuda else None, peak_bytes=peak)


# --- the stack's parameters, blocks and columns -------------------------------------

def layer_params(C, device, seed):
    """One layer's phi, alpha, beta (fp32): phi xavier-uniform as HyperConnection's, alpha and beta
    drawn away from HyperConnection's 0.01 and 0 so the mixing is far from uniform and the columns'
    agreement check below means something (the times do not depend on the values)."""
    g = torch.Generator().manual_seed(seed)
    N, K = 2 * STREAMS + STREAMS * STREAMS, STREAMS * C
    phi = (2 * torch.rand(N, K, generator=g) - 1) * math.sqrt(6 / (N + K))
    alpha, beta = torch.rand(3, generator=g), 0.1 * torch.randn(N, generator=g)
    return {k: nn.Parameter(v.to(device)) for k, v in (("phi", phi), ("alpha", alpha), ("beta", beta))}


def make_blocks(kind, C, device, seed):
    if kind == "identity":
        return [nn.Identity() for _ in range(LAYERS)]
    if kind == "linear":
        torch.manual_seed(seed)
        return [nn.Linear(C, C, bias=False, device=device, dtype=ACT) for _ in range(LAYERS)]
    raise ValueError(f"block must be identity or linear, got {kind!r}")


def unique(tensors):
    out, ids = [], set()
    for t in tensors:
        if id(t) not in ids:
            ids.add(id(t))
            out.append(t)
    return out


def mhc_column(fused, params, blocks, C, device):
    """(run, leaves) of mhc.HyperConnectionStack with the shared parameters' values and blocks."""
    if not hasattr(mhc, "HyperConnectionStack"):
        raise Absent("mhc.HyperConnectionStack is not in this build")
    stack = mhc.HyperConnectionStack(blocks, STREAMS, C, fused=fused, device=device, **MHC_CONVENTIONS)
    with torch.no_grad():
        for hc, p in zip(stack.layers, params):
            for k, v in p.items():
                getattr(hc, k).copy_(v)
    return stack, unique(stack.parameters())


def peer_column(layer, params, blocks):
    """(run, leaves) of a stack written out layer by layer: layer(x, params, block) -> x_next."""
    def run(x):
        for p, block in zip(params, blocks):
            x = layer(x, p, block)
        return x
    return run, unique([t for p in params for t in p.values()] + [t for b in blocks for t in b.parameters()])


def te_layer(te, acc_buffer):
    """One layer through TE's API as its docstring shows: generate_mix_and_aggregate, the block,
    fused_expand_combine; with acc_buffer, x's gradient is summed in an fp32 buffer per layer."""
    def layer(x, p, block):
        M, C, n = x.shape
        x4 = x.view(M, 1, C, n)
        buf = torch.empty(x4.shape, dtype=torch.float32, device=x.device) if acc_buffer else None
        y, post, P = te.mhc_generate_mix_and_aggregate(x4, p["phi"], p["alpha"], p["beta"].view(1, -1), None,
                                                       True, buf)
        f = block(y.view(M, C)).view(M, 1, C)
        return te.mhc_fused_expand_combine(f, None, post, x4, P, n, True, buf).view(M, C, n)
    return layer


def plain_layer(compiled):
    """bench.py's plain PyTorch ops as a pre step and a post step, each torch.compile'd when `compiled`."""
    ops = bench.plain_ops()

    def pre(x, phi, alpha, beta):
        h, ms = ops["project"](x, phi)
        pre_w, post_w, logits = ops["scale"](h, ms, alpha, beta, STREAMS)
        return ops["aggregate"](x, pre_w), post_w, ops["sinkhorn"](logits)

    post = ops["expand_combine"]
    if compiled:
        pre, post = torch.compile(pre, dynamic=False), torch.compile(post, dynamic=False)

    def layer(x, p, block):
        y, post_w, P = pre(x, p["phi"], p["alpha"], p["beta"])
        return post(block(y), post_w, x, P)
    return layer


def column(name, params, blocks, C, device, te, compiled):
    """(run, leaves) of the named column; raises Absent when it cannot run here. `te`: TE's module, or
    why there is none (load_te's state)."""
    if name.startswith("mhc.te"):
        from mhc import te as mhc_te
        return peer_column(te_layer(mhc_te, name == "mhc.te acc buffer"), params, blocks)
    if name.startswith("mhc"):
        return mhc_column(name == "mhc fused", params, blocks, C, device)
    if name.startswith("TE"):
        if isinstance(te, str):
            raise Absent("no TE checkout (--te)" if te == "absent" else f"Transformer Engine {te}")
        return peer_column(te_layer(te, name == "TE acc buffer"), params, blocks)
    return peer_column(plain_layer(compiled), params, blocks)


# --- measurements --------------------------------------------------------------

def inputs(M, C, device, seed):
    """x sets [M, C, n] (bf16, requiring grad): several rotated when small, as bench.py does."""
    g = torch.Generator(device).manual_seed(seed)  # drawn where they live: 0.9 G values at C = 7168
    small = device.type == "cuda" and M * C * STREAMS * 2 < 4 * bench.l2_bytes()
    return [torch.randn(M, C, STREAMS, generator=g, device=device).to(ACT).requires_grad_()
            for _ in range(4 if small else 1)]


def time_pair(run, leaves, xs, timeit, queued, reps):
    """Median ms of the forward and of forward + backward (autograd.grad of x and the leaves)."""
    def fwd(x):
        run(x)

    def fwd_bwd(x):
        out = run(x)
        torch.autograd.grad([out], [x] + leaves, bench.grads_like([out]))

    sets = [(x,) for x in xs]
    fwd_ms = timeit(fwd, sets, reps=reps[0], warmup=3, ahead=queued)
    return fwd_ms, timeit(fwd_bwd, sets, reps=reps[1], warmup=3, ahead=queued)


def block_time(block, M, C, device, timeit, queued, reps):
    """Per-layer microseconds (fwd, bwd) of the block alone on a [M, C] input; 0 for identity."""
    if isinstance(block, nn.Identity):
        return 0.0, 0.0
    y = torch.randn(M, C, device=device, dtype=ACT, requires_grad=True)
    fwd_ms, both_ms = time_pair(block, list(block.parameters()), [y], timeit, queued, reps)
    return fwd_ms * 1e3, max(both_ms - fwd_ms, 0.0) * 1e3


def measure_column(name, run, leaves, xs, ctx):
    """One column's row: per-layer times, % floor, memory."""
    fwd_ms, both_ms = time_pair(run, leaves, xs, ctx["timeit"], ctx["queued"], ctx["reps"])
    row = dict(ctx["key"], column=name, status="ok", timing="queued" if ctx["queued"] else "idle",
               fwd_us=fwd_ms * 1e3 / LAYERS, bwd_us=max(both_ms - fwd_ms, 0.0) * 1e3 / LAYERS,
               block_fwd_us=ctx["block_us"][0], block_bwd_us=ctx["block_us"][1])
    row["total_us"] = row["fwd_us"] + row["bwd_us"]
    fb = floor_bytes(STREAMS, row["M"], row["C"])
    for d, block_us in (("fwd", row["block_fwd_us"]), ("bwd", row["block_bwd_us"]),
                        ("total", row["block_fwd_us"] + row["block_bwd_us"])):
        row[f"{d}_floor"] = floor_fraction(fb[d], ctx["bandwidth"], row[f"{d}_us"] - block_us)
    row.update(memory(run, leaves, xs[0]))
    return row


def live_tensors():
    """The tensors with memory that Python holds now, after a full collection (ids -> tensor):
    not torch.compile's fake or functional tensors (its caches keep some; they hold no memory
    and their storages have no address)."""
    gc.collect()
    return {id(o): o for o in gc.get_objects() if issubclass(type(o), torch.Tensor) and has_memory(o)}


def has_memory(t):
    """Whether t's storage is real memory (fake, functional and meta tensors' have no address)."""
    if isinstance(t, torch._subclasses.FakeTensor) or t.device.type == "meta":
        return False
    try:
        t.untyped_storage().data_ptr()
    except RuntimeError:
        return False
    return True


def left_alive(before_ids, keep=()):
    """(count, bytes) of the tensors alive now that were not before (`before_ids`), leaving out
    those the configuration keeps on purpose (`keep`: the reference output, bench.py's cached
    gradients): what a column left behind. Bytes count each storage once."""
    keep_ids = {id(t) for t in keep}
    new = [t for i, t in live_tensors().items() if i not in before_ids and i not in keep_ids]
    storages = {storage_key(t): t.untyped_storage().nbytes() for t in new}
    return len(new), sum(storages.values())


def agreement(out, ref):
    """max |out - ref| / max |ref| (the columns compute the same up to rounding)."""
    return ((out.float() - ref.float()).abs().max() / ref.float().abs().max().clamp_min(1e-30)).item()


def run_config(kind, M, C, ctx):
    """Every column on one (block, M, C); returns their rows (absent and failed columns included)."""
    device = ctx["device"]
    key = dict(block=kind, n=STREAMS, M=M, C=C, layers=LAYERS)
    params = [layer_params(C, device, seed=100 + i) for i in range(LAYERS)]
    blocks = make_blocks(kind, C, device, seed=7)
    queued = device.type == "cuda" and bench.queued(M)
    # (forward, forward + backward) calls: fewer where each is long; a CPU run is a smoke run.
    reps = (20, 15) if queued else (30, 20) if device.type == "cuda" else (5, 5)
    cfg = dict(ctx, key=key, queued=queued, reps=reps)
    cfg["block_us"] = block_time(blocks[0], M, C, device, ctx["timeit"], queued, reps)
    xs = inputs(M, C, device, seed=1)
    rows, ref, ref_name = [], None, None
    for name in ctx["columns"]:
        before = set(live_tensors())

        def measure():
            nonlocal ref, ref_name
            # run and leaves (the column's layers: TE's acc buffers, compiled graphs) go on return
            run, leaves = column(name, params, blocks, C, device, ctx["te"], ctx["compiled"])
            out = run(xs[0])  # also the first call: JIT, autotuning, compiling
            if ref is None:
                ref, ref_name = out.detach(), name
            diff = agreement(out, ref)
            del out
            row = measure_column(name, run, leaves, xs, cfg)
            row.update(max_rel_diff=diff, diff_vs=ref_name)
            return row

        row = column_row(key, name, measure)
        row["left_tensors"], row["left_bytes"] = left_alive(before, keep=[ref] + cached_grads())
        if device.type == "cuda":
            torch.cuda.empty_cache()
            row["allocated_after"] = torch.cuda.memory_allocated()
        rows.append(row)
        print(line(row), flush=True)
        if "allocated_after" in row:
            print(f"    allocated after {kind} M={M} C={C} {name}: {mib(row['allocated_after'])} MiB", flush=True)
    bench._GRADS.clear()  # (one [M, C, n] gradient per shape: 1.9 GB at C = 7168)
    return rows


def cached_grads():
    return [t for ts in bench._GRADS.values() for t in ts]


# --- output --------------------------------------------------------------------

def pct(v):
    return f"{v:.0%}" if v is not None else "-"


def mib(v, digits=0):
    return f"{v / MIB:.{digits}f}" if v is not None else "-"


def leftovers(r):
    """The tensors the column left alive (a leak: the next column would lack their memory)."""
    out = ""
    if r.get("left_tensors"):
        out += f"; LEFT ALIVE {r['left_tensors']} tensors, {mib(r['left_bytes'], 1)} MiB"
    return out


def line(r):
    """One column's full log line."""
    head = f"  {r['block']:8s} M={r['M']:5d} C={r['C']:4d} {r['column']:{NAME_W}s}"
    if r["status"] != "ok":
        return f"{head} {r['status']}{leftovers(r)}"
    return (f"{head} fwd {r['fwd_us']:9.1f} bwd {r['bwd_us']:9.1f} f+b {r['total_us']:9.1f} us/layer;"
            f" floor fwd {pct(r['fwd_floor'])} bwd {pct(r['bwd_floor'])} f+b {pct(r['total_floor'])};"
            f" saved {mib(r['saved_bytes'], 1)} held {mib(r['held_bytes'], 1)} MiB/layer, peak {mib(r['peak_bytes'])} MiB;"
            f" diff {r['max_rel_diff']:.1e} vs {r['diff_vs']}{'' if r['max_rel_diff'] <= AGREE else ' (DIFFERS)'};"
            f" {r['wall_s']} s{leftovers(r)}")


TABLE_HEADER = (f"{'column':{NAME_W}s} {'fwd us':>8s} {'bwd us':>8s} {'f+b us':>8s} {'%fl fwd':>7s} {'%fl f+b':>7s}"
                f" {'TE/this':>7s} {'saved MiB/l':>11s} {'peak MiB':>8s}")


def table(rows, bandwidth):
    """The short table: per configuration, each column's per-layer times, % of the floor, TE's
    fwd+bwd time over the column's (above 1: faster than TE), saved MiB per layer, the stack's peak."""
    out = []
    for kind, M, C in dict.fromkeys((r["block"], r["M"], r["C"]) for r in rows):
        group = [r for r in rows if (r["block"], r["M"], r["C"]) == (kind, M, C)]
        fb = floor_bytes(STREAMS, M, C)
        out.append(f"\n{kind} block, n = {STREAMS}, M = {M}, C = {C}; per layer of {LAYERS}; floor fwd"
                   f" {fb['fwd'] / bandwidth * 1e6:.1f} us, fwd+bwd {fb['total'] / bandwidth * 1e6:.1f} us")
        ok = [r for r in group if r["status"] == "ok"]
        if ok and ok[0]["block_fwd_us"]:
            out.append(f"block alone: fwd {ok[0]['block_fwd_us']:.1f} us, bwd {ok[0]['block_bwd_us']:.1f} us"
                       " (taken off the time for % floor)")
        out.append(TABLE_HEADER)
        te = next((r for r in ok if r["column"] == "TE"), None)
        for r in group:
            if r["status"] != "ok":
                out.append(f"{r['column']:{NAME_W}s} {r['status'][:100]}")
                continue
            ratio = f"{te['total_us'] / r['total_us']:.2f}" if te else "-"
            out.append(f"{r['column']:{NAME_W}s} {r['fwd_us']:8.1f} {r['bwd_us']:8.1f} {r['total_us']:8.1f}"
                       f" {pct(r['fwd_floor']):>7s} {pct(r['total_floor']):>7s} {ratio:>7s}"
                       f" {mib(r['saved_bytes'], 1):>11s} {mib(r['peak_bytes']):>8s}"
                       + ("" if r["max_rel_diff"] <= AGREE else f"  output differs from {r['diff_vs']}'s"))
    return "\n".join(out)


def revision(path):
    """A checkout's short commit, or None where it is no git checkout (the GPU machine's copy)."""
    try:
        r = subprocess.run(["git", "-C", path, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                           timeout=10)
        return r.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def load_te(path):
    """(TE's mhc module or None, its state for the JSON)."""
    if not path:
        return None, "absent"
    try:
        return bench.te_module(path), "loaded"
    except Exception as e:  # an incompatible checkout is reported, not fatal
        return None, f"failed to load: {e!r}"


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--te", default=None, metavar="PATH", help="an outside Transformer Engine checkout")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--config", action="append", default=None, metavar="BLOCK,M,C",
                    help="only these configurations (repeatable); BLOCK is identity or linear")
    ap.add_argument("--columns", default=None, help="only these columns, comma-separated")
    ap.add_argument("--budget-s", type=float, default=0, help="start no configuration after this many seconds")
    ap.add_argument("--device", default="cuda", help="cuda, or cpu for a smoke run (wall-clock times)")
    ap.add_argument("--no-compile", action="store_true", help="run the plain PyTorch column eagerly")
    ap.add_argument("--timing", choices=("auto", "idle", "queued"), default="auto", help="as bench.py's")
    return ap.parse_args(argv)


def run_configs(configs, keys, run, a, result, start, json_path):
    """Adds run(*config)'s rows to result["rows"] for each configuration (a tuple named by `keys`) in order,
    writing result to json_path after each and at the end; past a.budget_s seconds from `start` (when set),
    records the rest in result["skipped"] instead. (bench/serve.py uses it too.)"""
    for config in configs:
        label = " ".join(v if isinstance(v, str) else f"{k}={v}" for k, v in zip(keys, config))
        if a.budget_s and time.perf_counter() - start > a.budget_s:
            result["skipped"].append(dict(zip(keys, config)))
            print(f"skipped {label}: past the {a.budget_s:.0f} s budget", flush=True)
            continue
        print(f"config {label} at {time.perf_counter() - start:.0f} s", flush=True)
        result["rows"] += run(*config)
        with open(json_path, "w") as f:  # after every configuration
            json.dump(result, f, indent=1)
    with open(json_path, "w") as f:
        json.dump(result, f, indent=1)
    print(f"done at {time.perf_counter() - start:.0f} s")


def main(argv=None):
    a = parse_args(argv)
    bench.TIMING = a.timing
    torch.manual_seed(0)
    device = torch.device(a.device)
    cuda = device.type == "cuda"
    # TF32 is the convention for torch.compile's matmul too; one specialisation per shape (bench.py).
    torch.backends.cuda.matmul.allow_tf32 = True
    torch._dynamo.config.cache_size_limit = 64
    bandwidth = bench.copy_bandwidth(device, n=(1 << 30) if cuda else (1 << 24))
    te, te_state = load_te(a.te)
    columns = tuple(c for c in COLUMNS if not a.columns or c in a.columns.split(","))
    if a.no_compile:
        columns = tuple("torch eager" if c == "torch.compile" else c for c in columns)
    configs = [(b, int(M), int(C)) for b, M, C in (c.split(",") for c in a.config)] if a.config else CONFIGS
    result = dict(device=torch.cuda.get_device_name() if cuda else "cpu", date=time.strftime("%Y-%m-%d"),
                  copy_bandwidth=bandwidth, te=te_state, te_revision=revision(a.te) if a.te else None,
                  torch=torch.__version__, mhc_revision=revision(os.path.dirname(os.path.abspath(__file__))),
                  layers=LAYERS, columns=list(columns), rows=[], skipped=[],
                  command=" ".join(["python3 bench/stack.py"] + (argv if argv is not None else sys.argv[1:])))
    print(f"device: {result['device']}; copy bandwidth {bandwidth / 1e12:.2f} TB/s (read + write);"
          f" Transformer Engine: {te_state}; mhc.HyperConnectionStack: {hasattr(mhc, 'HyperConnectionStack')}",
          flush=True)
    ctx = dict(device=device, timeit=bench.timer(device), bandwidth=bandwidth, te=te or te_state, columns=columns,
               compiled=not a.no_compile)
    os.makedirs(a.out, exist_ok=True)
    start = time.perf_counter()
    run_configs(configs, ("block", "M", "C"), lambda kind, M, C: run_config(kind, M, C, ctx), a, result, start,
                os.path.join(a.out, "stack.json"))
    print("\n== table" + table(result["rows"], bandwidth), flush=True)
    return result


if __name__ == "__main__":
    main()
