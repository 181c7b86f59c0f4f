"""Where the one-launch seam's time goes (issue 36): graph replay per seam vs the kernel's own duration.

    python3 bench/probes/seam_fixed_cost.py [--ms 1,4,16] [--cs 4096,7168] [--variants NAME=FLAGS;...]
                                            [--profile NAME,...] [--trace-dir DIR]

Per variant a child process (its own MHC_CACHE_DIR, so its kernels are compiled for it) runs, per (C, M),
bench/serve.py's chain of 8 seams (mhc.inference.post_pre with out=, n = 4, bf16, fp32 phi, layout (C, n),
TE conventions) with MHC_ONE_LAUNCH_MAX_TOKENS=256 (the one-launch kernel at every M here) and prints:
- graph: CUDA-graph replay time per seam (median of bench.graph_time's replays, / 8);
- kern (variants named in --profile): the median duration of the seam's kernel, from a torch.profiler
  trace (CUDA activities) of 10 replays of the same graph;
- period: the median start-to-start time of consecutive kernels inside a replay (the seam's period on
  the GPU: kern + gap; with programmatic dependent launch the kernels overlap, and kern includes the
  time a grid waits for its predecessor);
- gap: median (start of kernel i+1) - (end of kernel i) inside a replay (negative: overlap);
- busy: the kernels' summed durations per seam, and launches per seam (the multi-launch path has several).
A variant's FLAGS go to the compiler's environment as MHC_ONE_LAUNCH_DEBUG (a probe-only switch of the
branch that measures stages; the product compiler ignores it) and "multi" runs the multi-launch path
(MHC_ONE_LAUNCH_MAX_TOKENS=0). Prints one line per (variant, C, M) and a table last.
"""
import argparse
import json
import os
import re
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from children import child_rows  # noqa: E402  (beside this file)
DEFAULT_VARIANTS = "one=;multi=multi"  # the switch's variants need the probe branch's compiler


def kernel_stats(kernels):
    """(median duration, median period, median gap, name, count, summed duration) of a config's kernels (chrome
    trace events, ts and dur in us): duration of the most frequent kernel; period and gap between consecutive
    kernels inside a replay."""
    names = [k["name"] for k in kernels]
    top = max(set(names), key=names.count)
    durs = [k["dur"] for k in kernels if k["name"] == top]
    periods, gaps = [], []
    for a, b in zip(kernels, kernels[1:]):
        start_to_start = b["ts"] - a["ts"]
        if start_to_start < 50:  # inside a replay (replays are launched from the host, far apart)
            periods.append(start_to_start)
            gaps.append(b["ts"] - (a["ts"] + a["dur"]))
    med = lambda v: statistics.median(v) if v else float("nan")
    return med(durs), med(periods), med(gaps), top, len(kernels), sum(k["dur"] for k in kernels)


def per_kernel(kernels):
    """Median duration (us) per kernel, named by its launch (the name past the spec's hash)."""
    by = {}
    for k in kernels:
        by.setdefault(re.sub(r"^.*_[0-9a-f]{16}_", "", k["name"]), []).append(k["dur"])
    return {name: round(statistics.median(d), 2) for name, d in sorted(by.items())}


def split_configs(trace_path, count):
    """The trace's kernels in `count` groups, one per config: the child idles 5 ms between configs."""
    with open(trace_path) as f:
        events = json.load(f)["traceEvents"]
    kernels = sorted((e for e in events if e.get("cat") == "kernel"), key=lambda e: e["ts"])
    groups = [[]]
    for a, b in zip([None] + kernels, kernels):
        if a is not None and b["ts"] - (a["ts"] + a["dur"]) > 2000:
            groups.append([])
        groups[-1].append(b)
    return groups if len(groups) == count else None


def child(ms, cs, trace_dir, tag, profile):
    import time
    import torch
    import bench
    import serve
    device = torch.device("cuda")
    rows, graphs = [], []
    for C, M, p, args, chain in serve.fused_configs(cs, ms, device):
        with torch.no_grad():
            graph_ms = bench.graph_time(chain, args, reps=30, warmup=5)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                chain(*args)
        graphs.append((graph, args, p, chain))  # the chain holds the graph's out= buffers
        rows.append(dict(C=C, M=M, graph=graph_ms * 1e3 / serve.SEAMS))
    if profile:
        trace = os.path.join(trace_dir, f"{tag}.json")
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for graph, *_ in graphs:
                for _ in range(10):
                    graph.replay()
                    torch.cuda.synchronize()
                time.sleep(0.005)
        prof.export_chrome_trace(trace)
        groups = split_configs(trace, len(graphs))
        for row, kernels in zip(rows, groups or []):
            d, period, gap, name, count, busy = kernel_stats(kernels)
            row.update(kern=d, period=period, gap=gap, name=name, launches=count / (10 * serve.SEAMS),
                       busy=busy / (10 * serve.SEAMS), per_kernel=per_kernel(kernels))
        if groups is None:
            print("the trace's kernels did not split into one group per config", flush=True)
    for row in rows:
        print("ROW " + json.dumps(row), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ms", default="1,4,16")
    ap.add_argument("--cs", default="4096,7168")
    ap.add_argument("--variants", default=DEFAULT_VARIANTS)
    ap.add_argument("--trace-dir", default=None)
    ap.add_argument("--profile", default="one,multi", help="the variants also traced by torch.profiler")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    ms, cs = [int(v) for v in a.ms.split(",")], [int(v) for v in a.cs.split(",")]
    trace_dir = a.trace_dir or tempfile.mkdtemp(prefix="seam-fixed-")
    os.makedirs(trace_dir, exist_ok=True)
    if a.child:
        return child(ms, cs, trace_dir, a.child, a.child in a.profile.split(","))
    variants = [v.split("=", 1) for v in a.variants.split(";") if v]
    cache_root = os.environ.get("MHC_CACHE_DIR", tempfile.gettempdir())
    results = {}
    for name, flags in variants:
        env = dict(os.environ, MHC_ONE_LAUNCH_MAX_TOKENS="0" if flags == "multi" else "256",
                   MHC_ONE_LAUNCH_DEBUG="" if flags == "multi" else flags,
                   MHC_CACHE_DIR=os.path.join(cache_root, f"fixed-cost-{name}"))
        rows = child_rows(name, [__file__, "--child", name, "--ms", a.ms, "--cs", a.cs, "--trace-dir", trace_dir,
                                 "--profile", a.profile], env)
        results.update({(name, C, M): r for (C, M), r in rows.items()})
    print("us per seam: graph replay / kernel duration / kernel period / gap (profiler, inside a replay)")
    print(f"{'variant':>14} {'C':>5} {'M':>3} | {'graph':>6} {'kern':>6} {'period':>6} {'gap':>6} {'busy':>6}"
          f" {'launch':>6}")
    for name, _ in variants:
        for C in cs:
            for M in ms:
                r = results.get((name, C, M))
                if not r:
                    print(f"{name:>14} {C:>5} {M:>3} | -")
                    continue
                cell = lambda k: f"{r[k]:6.2f}" if k in r else "     -"
                print(f"{name:>14} {C:>5} {M:>3} | {cell('graph')} {cell('kern')} {cell('period')} {cell('gap')}"
                      f" {cell('busy')} {cell('launches')}")
    print("median us per launch (profiler): " + "; ".join(
        f"{n} C={C} M={M}: {r['per_kernel']}" for (n, C, M), r in results.items() if "per_kernel" in r))


if __name__ == "__main__":
    main()
