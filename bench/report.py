"""docs/PERFORMANCE.md, generated from one results file.

    python3 bench/report.py [docs/perf/results.json] > docs/PERFORMANCE.md
    python3 bench/report.py merge OUT.json bench-1.json ... bench-4.json --kernels k_*.json \\
        [--setup key=value ...]

`merge` gathers one complete run of bench/run-table.sh (its four bench/bench.py
perf.json files and the bench/kernel_times.py files of part 4) into one results
file; --setup records what the JSON files do not know (driver, torch, code
commit). test/python/test_docs.py checks that docs/PERFORMANCE.md is what this
script prints for the committed results file.
"""

import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "docs", "perf", "results.json")
OPS = ("project", "scale", "sinkhorn", "aggregate", "expand_combine", "layer", "layer_graph")


def merge(argv):
    """report.py merge OUT perf.json ... [--kernels k.json ...] [--setup key=value ...]"""
    out, runs, kernels, setup, into = argv[0], [], [], {}, "runs"
    for arg in argv[1:]:
        if arg in ("--kernels", "--setup"):
            into = arg[2:]
        elif into == "setup":
            key, value = arg.split("=", 1)
            setup[key] = value
        else:
            (kernels if into == "kernels" else runs).append(json.load(open(arg)))
    with open(out, "w") as f:
        json.dump({"setup": setup, "runs": runs, "kernel_times": kernels}, f, indent=1)
        f.write("\n")


def command(line):
    """A run's command line without this machine's paths."""
    out, prev = ["python3 bench/bench.py"], None
    toks = line.split()
    for tok in toks[1:] if toks[0].endswith(".py") else toks:
        if prev != "--out" and tok != "--out":
            out.append("<TE checkout>" if prev == "--te" else tok)
        prev = tok
    return " ".join(out)


def table(idx, n, M, C):
    """One shape's table: mhc's times, % of the bandwidth floor, and peer time / mhc time."""
    yield f"\n## n = {n}, M = {M}, C = {C}\n"
    yield "| op | fwd us | fwd % floor | bwd us | bwd % floor | x TE fwd | x TE bwd | x compile fwd | x compile bwd |"
    yield "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    for op in OPS:
        m = idx.get(("mhc", op, n, M, C))
        if not m:
            continue
        te, tc = idx.get(("TE", op, n, M, C)), idx.get(("torch.compile", op, n, M, C))
        graph = op == "layer_graph"
        us = lambda k: "-" if graph and k == "bwd_us" else f"{m[k]:.1f}"
        pct = lambda k: f"{m[k]:.0%}" if m.get(k) else "-"
        ratio = lambda r, k: "-" if not r or (graph and k == "bwd_us") else f"{r[k] / m[k]:.2f}"
        label = "layer fwd (CUDA graph)" if graph else "layer (pre, identity block, post)" if op == "layer" else op
        yield (f"| {label} | {us('fwd_us')} | {pct('fwd_sol')} | {us('bwd_us')} | {pct('bwd_sol')}"
               f" | {ratio(te, 'fwd_us')} | {ratio(te, 'bwd_us')} | {ratio(tc, 'fwd_us')} | {ratio(tc, 'bwd_us')} |")


def device_times(kernel_times):
    """Each op's kernels alone (torch.profiler), forward / backward, per measured shape."""
    cols = [(kt["shape"], kt.get("impl", "mhc")) for kt in kernel_times]
    yield "| op | " + " | ".join(f"{impl} n,M,C = {shape}" for shape, impl in cols) + " |"
    yield "| --- |" + " ---: |" * len(cols)
    for op in OPS[:5]:
        cells = []
        for kt in kernel_times:
            ks = [k for k in kt["kernels"] if k["op"] == op]
            fwd = sum(k["us"] for k in ks if "_bwd_" not in k["kernel"])
            bwd = sum(k["us"] for k in ks if "_bwd_" in k["kernel"])
            cells.append("-" if not ks else f"{fwd:.1f} / {bwd:.1f}" if bwd else f"{fwd:.1f} / -")
        yield f"| {op} | " + " | ".join(cells) + " |"


def slower(rows, idx):
    """Rows where a peer took less time than mhc."""
    for r in rows:
        if r["impl"] == "mhc":
            continue
        m = idx.get(("mhc", r["op"], r["n"], r["M"], r["C"]))
        for k in ("fwd_us", "bwd_us"):
            if m and r[k] > 0 and m[k] > 0 and r[k] < m[k]:
                yield (f"- {r['op']} {k[:3]}, n = {r['n']}, M = {r['M']}, C = {r['C']}: {r['impl']}"
                       f" {r[k]:.1f} us, mhc {m[k]:.1f} us ({r[k] / m[k]:.3f}x)")


def targets(idx, extras):
    """The performance targets (n = 4, bf16, M = 32768, C = 4096 and 7168), each with its figures."""
    m = lambda op, C, M=32768: idx.get(("mhc", op, 4, M, C))
    te = lambda op, C, M=32768: idx.get(("TE", op, 4, M, C))
    tc = lambda op, C: idx.get(("torch.compile", op, 4, 32768, C))
    Cs = (4096, 7168)
    yes = lambda ok: "met" if ok else "**not met**"
    for op in ("project", "aggregate", "expand_combine"):
        for k in ("fwd", "bwd"):
            r = [(te(op, C)[k + "_us"] / m(op, C)[k + "_us"], m(op, C)[k + "_sol"]) for C in Cs]
            yield (f"| {op} {k} >= 1.0x TE and >= 93% floor | "
                   + "; ".join(f"{x:.3f}x, {s:.0%}" for x, s in r) + f" | {yes(all(x >= 1 and s >= .93 for x, s in r))} |")
    for op in ("scale", "sinkhorn"):  # few bytes: no floor
        r = {k: [te(op, C)[k + "_us"] / m(op, C)[k + "_us"] for C in Cs] for k in ("fwd", "bwd")}
        yield (f"| {op} fwd and bwd >= 1.0x TE | " + "; ".join(f"{k} " + ", ".join(f"{x:.3f}x" for x in v)
                                                               for k, v in r.items())
               + f" | {yes(min(min(v) for v in r.values()) >= 1)} |")
    r = [te("project", C)["bwd_us"] / m("project", C)["bwd_us"] for C in Cs]
    yield f"| project bwd >= 3x TE | " + "; ".join(f"{x:.2f}x" for x in r) + f" | {yes(min(r) >= 3)} |"
    r = [m("sinkhorn", C)["fwd_us"] + m("sinkhorn", C)["bwd_us"] for C in Cs]
    yield f"| sinkhorn fwd + bwd <= 30 us | " + "; ".join(f"{x:.1f} us" for x in r) + f" | {yes(max(r) <= 30)} |"
    for name, peer in (("TE", te), ("torch.compile", tc)):
        r = [(peer("layer", C)["fwd_us"] + peer("layer", C)["bwd_us"]) / (m("layer", C)["fwd_us"] + m("layer", C)["bwd_us"])
             for C in Cs]
        yield f"| layer fwd + bwd >= 1.5x {name} | " + "; ".join(f"{x:.2f}x" for x in r) + f" | {yes(min(r) >= 1.5)} |"
    x = m("layer", 4096, 128)["fwd_us"]
    yield f"| layer fwd at M = 128, C = 4096 <= 60 us (from PyTorch) | {x:.1f} us | {yes(x <= 60)} |"
    cold = max(v["max"] for v in extras["cold_compile_s"].values())
    yield f"| cold JIT <= 1 s per kernel | slowest {cold} s | {yes(cold <= 1)} |"
    d = extras["dispatch_us"]
    op = min(v for k, v in d.items() if k.startswith("mhc."))
    floor = next((v for k, v in d.items() if k.startswith("torch.mul")), None)
    yield (f"| warm dispatch <= 5 us host time per op | {op} us (PyTorch's own floor, torch.mul: {floor} us) |"
           f" {yes(op <= 5)} |")


def report(d):
    runs, setup = d["runs"], d.get("setup", {})
    rows = [r for run in runs for r in run["rows"]]
    idx = {(r["impl"], r["op"], r["n"], r["M"], r["C"]): r for r in rows}
    extras = next(run for run in runs if run.get("dispatch_us"))
    bws = sorted({f"{run['copy_bandwidth'] / 1e12:.2f}" for run in runs})
    yield "# Performance\n"
    yield "<!-- Generated by bench/report.py from docs/perf/results.json; edit those, not this file. -->\n"
    yield (f"**Hardware.** {runs[0]['device']} ({setup.get('driver', 'driver not recorded')}), one GPU;"
           f" measured device-to-device copy bandwidth {' / '.join(bws)} TB/s (read + write). Date: {runs[0]['date']}.\n")
    yield (f"**Software.** mhc {setup.get('mhc', '')} (ptxas {setup.get('ptxas', '?')}); torch {setup.get('torch', '?')}"
           f" for torch.compile; Transformer Engine's Triton mHC kernels from {setup.get('te', 'an outside checkout')},"
           " loaded by path with a stand-in for its general_gemm (never vendored).\n")
    yield ("**Method.** CUDA events, median of 30 forward / 20 forward+backward calls after 5 warm-up calls,"
           " inputs rotated when smaller than 4x L2; backward = (forward + backward) - forward through"
           " torch.autograd.grad. Every column computes the same thing with TE's conventions: layout (C, n),"
           " bf16 activations, fp32 mixing, norm_eps = FLT_EPSILON, pre_eps = 0, log Sinkhorn with 20 iterations,"
           " TF32 projection. From M = 4096 each call is queued behind a GPU spin, so the time is the GPU's work;"
           " at M = 128 each call starts from an idle GPU and includes the host's time to the first launch."
           " % floor = the op's fewest IO bytes / copy bandwidth / measured time (100% = moving the bytes at"
           " the copy rate; a read-mostly stream can pass it by a few %). x TE and x compile = peer time / mhc"
           " time: above 1 means mhc is faster. Scale and sinkhorn move few bytes: no floor. TE's kernels take n = 4 only.\n")
    yield "## Against the targets (n = 4, M = 32768, C = 4096; 7168)\n"
    yield "| target | measured | |"
    yield "| --- | --- | --- |"
    yield from targets(idx, extras)
    for n, M, C in sorted({(r["n"], r["M"], r["C"]) for r in rows}):
        yield from table(idx, n, M, C)
    yield "\n## Device time per op\n"
    yield ("The kernels alone, without host time (bench/kernel_times.py, torch.profiler, median of 10 calls),"
           " forward / backward in us; TE's backward was not profiled.\n")
    yield from device_times(d["kernel_times"])
    yield "\n## Host dispatch and JIT\n"
    yield "Host time per warm call from Python (M = 1, 2000 calls, no synchronisation):\n"
    for k, v in extras["dispatch_us"].items():
        yield f"- {k}: {v} us"
    cold = extras["cold_compile_s"]
    worst = max(cold, key=lambda k: cold[k]["max"])
    yield (f"\nFirst call of a new kernel spec (mhc-compile: PTX and cubin): median {min(v['median'] for v in cold.values())}"
           f" to {max(v['median'] for v in cold.values())} s per kernel over {len(cold)} kernels; slowest {worst},"
           f" {cold[worst]['max']} s. Later calls and processes load the cached cubin.\n")
    yield "\n## When mhc is slower, or host-bound\n"
    yield "Rows of the tables where a peer is faster:\n"
    yield from (list(slower(rows, idx)) or ["- none"])
    yield ("\n- The streaming ops (aggregate, expand_combine) run at the copy rate, as TE's do: at large M the two"
           " tie within a few tenths of a percent, and which is ahead moves with the machine.")
    yield ("- Small calls (M = 128, and scale and sinkhorn at any M) are bound by host time: the GPU waits for"
           " the next launch (compare the tables with the device times above). Capture the step in a CUDA graph"
           " (mhc's ops never synchronise the host) or compile it with torch.compile (the ops have fake kernels),"
           " and call `mhc.pre` / `HyperConnection`, which run the pre step as one call.")
    yield ("- The first call with a new (op, n, dtype, layout, C, arch) compiles its kernel (time above);"
           " ship or pre-warm `MHC_CACHE_DIR` to keep that out of a job's first step.")
    yield ("- A call the kernels do not cover (a non-contiguous or misaligned input, float64, n > 8, a failed"
           " compile) runs the ATen reference on the GPU, with a one-time warning naming the reason: keep"
           " inputs contiguous; `MHC_LOG=1` and `mhc._C.stats()` show which path ran.")
    yield "\n## Knobs\n"
    yield "| knob | effect |"
    yield "| --- | --- |"
    yield "| `tf32=True` (ops, `HyperConnection`; TE's names default to it) | the projection multiplies with 2 bf16 parts of phi (TF32-class accuracy) instead of 3 (fp32-exact); faster where the projection is compute-bound (n >= 6) |"
    yield "| fusion | `mhc.pre` runs project, scale, sinkhorn and aggregate as one fused kernel spec for n <= 4 at any M and for larger n up to M = 512 tokens (beyond that as the four kernels, which are faster there); same bits either way |"
    yield "| `MHC_CACHE_DIR` | the kernel cache (default `$XDG_CACHE_HOME/mhc` or `~/.cache/mhc`) |"
    yield "| `MHC_COMPILER` | the `mhc-compile` to run (default: the one packaged in `mhc/bin`, else `mhc-compile` on `PATH`) |"
    yield "| `MHC_COMPILE_TIMEOUT` | seconds one compile may take (default 300) |"
    yield "| `MHC_FORCE_REFERENCE=1` | the ATen reference everywhere (to compare) |"
    yield "| `MHC_LOG=1` | log each new specialisation, compile (with its time) and cache hit |"
    yield "\n## Reproduce\n"
    yield ("On one GPU machine, with an outside TE checkout: `for p in 1 2 3 4; do bash bench/run-table.sh $p <TE checkout>;"
           " done`, then `python3 bench/report.py merge docs/perf/results.json bench-[1-4].json --kernels k*_*.json"
           " --setup driver=... torch=... mhc=... ptxas=... te=...` and"
           " `python3 bench/report.py > docs/PERFORMANCE.md`. The runs behind these tables:\n")
    for run in runs:
        yield f"- `{command(run['command'])}`"


def main(argv):
    if argv and argv[0] == "merge":
        return merge(argv[1:])
    with open(argv[0] if argv else RESULTS) as f:
        print("\n".join(report(json.load(f))))


if __name__ == "__main__":
    main(sys.argv[1:])
