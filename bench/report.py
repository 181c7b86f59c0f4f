"""Writes the tables of docs/PERF.md from bench/bench.py perf.json files
(several runs of one session are merged: rows, dispatch and cold-JIT numbers)
and, optionally, bench/kernel_times.py JSON files (--kernels FILE ...).

    python3 bench/report.py docs/perf.json [more.json ...] [--kernels k.json ...]
"""

import json
import sys


def command(line):
    """A run's command line with this machine's paths replaced."""
    out, prev = ["python3 bench/bench.py"], None
    toks = line.split()
    for tok in toks[1:] if toks[0].endswith(".py") else toks:
        out.append("<TE checkout>" if prev == "--te" else "<out>" if prev == "--out" else tok)
        prev = tok
    return " ".join(out)


def load(argv):
    """Merges perf.json files (and kernel_times JSONs after --kernels)."""
    runs, kernels, into = [], [], None
    for arg in argv:
        if arg == "--kernels":
            into = kernels
            continue
        (kernels if into is kernels else runs).append(json.load(open(arg)))
    d = dict(runs[0])
    d["commands"] = [run["command"] for run in runs]
    d["runs"] = runs
    d["rows"] = [r for run in runs for r in run["rows"]]
    for key in ("dispatch_us", "cold_compile_s"):
        d[key] = {k: v for run in runs for k, v in run.get(key, {}).items()}
    d["kernel_times"] = kernels
    return d


def main():
    d = load(sys.argv[1:])
    rows = d["rows"]
    idx = {(r["impl"], r["op"], r["n"], r["M"], r["C"]): r for r in rows}
    bw = d["copy_bandwidth"]
    print("# Performance\n")
    bws = ", ".join(f"{r['copy_bandwidth'] / 1e12:.2f}" for r in d["runs"])
    print(f"Device: {d['device']}. Date: {d['date']}. Measured copy bandwidth {bws} TB/s"
          " (device-to-device, read + write; one per run), the SOL reference.\n")
    print("Command (on the GPU machine, after test/gpu/setup-gpu.sh): `python3 bench/bench.py --te <TE checkout>"
          " [--shape n,M,C ...]`; this table merges the runs "
          + "; ".join(f"`{command(r)}`" for r in d["commands"])
          + ". The Transformer Engine column loads `transformer_engine/{common,pytorch}/triton/mhc.py` from an"
          f" outside checkout (TE main at d0067d0, PR #2978 merged) with a stand-in for general_gemm. TE: {d['te']}.\n")
    print("Method: CUDA events, median of 30 (forward) / 20 (forward+backward) runs after 5 warm-up runs,"
          " inputs rotated when smaller than 4x L2. backward = (forward + backward) - forward, through"
          " torch.autograd.grad (no accumulation into .grad) for every column. All columns use TE's conventions"
          " (layout (C, n), norm_eps = FLT_EPSILON, pre_eps = 0, log Sinkhorn with 20 iterations, TF32"
          " projection); torch.compile compiles plain PyTorch SPEC.md per static shape with TF32 matmuls."
          " % SOL = fewest IO bytes (bench/bench.py io_bytes) / measured time / the copy bandwidth measured"
          " in the same run. Rows with M >= 4096 (runs with \"timing\": \"queued\" rows) enqueue each call"
          " behind a ~1.7 ms GPU spin (torch.cuda._sleep) so that the events bracket the GPU's work for the"
          " call (kernels and the gaps between them), as in a training step where the host runs ahead; rows"
          " at M = 128 start each call from an idle GPU and include the host's latency to the first launch"
          " (25-65 us per op from Python on this machine; the target there is a call from PyTorch). Small ops"
          " (scale, sinkhorn; everything at M = 128) are host-bound under the idle method: see the device"
          " times per kernel at the end. Raw numbers: docs/perf/.\n")
    shapes = sorted({(r["n"], r["M"], r["C"]) for r in rows})
    for n, M, C in shapes:
        print(f"\n## n = {n}, M = {M}, C = {C} (bf16 activations, fp32 mixing)\n")
        print("| op | mhc fwd us | SOL | mhc bwd us | SOL | TE fwd | TE bwd | torch.compile fwd | torch.compile bwd |"
              " fwd vs TE | bwd vs TE | fwd vs compile | bwd vs compile |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for op in ("project", "scale", "sinkhorn", "aggregate", "expand_combine", "layer", "layer_graph"):
            m = idx.get(("mhc", op, n, M, C))
            if not m:
                continue
            te = idx.get(("TE", op, n, M, C))
            tc = idx.get(("torch.compile", op, n, M, C))
            sol = lambda v: f"{v:.0%}" if v else "-"
            fwd_only = op == "layer_graph"
            num = lambda r, k: ("-" if fwd_only and k == "bwd_us" else f"{r[k]:.1f}") if r else "absent"
            ratio = lambda r, k: f"{r[k] / m[k]:.2f}x" if r and m[k] > 0 else "-"
            label = "layer fwd, CUDA graph replay" if op == "layer_graph" else op
            print(f"| {label} | {m['fwd_us']:.1f} | {sol(m.get('fwd_sol'))} | {num(m, 'bwd_us')} | {sol(m.get('bwd_sol'))}"
                  f" | {num(te, 'fwd_us')} | {num(te, 'bwd_us')} | {num(tc, 'fwd_us')} | {num(tc, 'bwd_us')}"
                  f" | {ratio(te, 'fwd_us')} | {ratio(te, 'bwd_us')} | {ratio(tc, 'fwd_us')} | {ratio(tc, 'bwd_us')} |")
    print("\nRatios are peer time / mhc time (above 1 means mhc is faster).\n")
    print("## Host dispatch and JIT\n")
    print("Host microseconds per warm call (M = 1, 2000 calls without synchronisation):\n")
    for k, v in d["dispatch_us"].items():
        print(f"- {k}: {v} us")
    print("\nCold compile (mhc-compile wall time per kernel: PTX and cubin, bf16, C = 7168, on the GPU machine;"
          " median and slowest of the repeats):\n")
    cold = lambda v: (f"{v['median']} s (max {v['max']} s)" if isinstance(v, dict) else
                      v if isinstance(v, str) else f"{v} s")
    print("\n".join(f"- {k}: {cold(v)}" for k, v in d["cold_compile_s"].items()))
    print()
    for kt in d["kernel_times"]:
        n, M, C = kt["shape"].split(",")
        impl = kt.get("impl", "mhc")
        which = "" if impl == "mhc" else f", {impl} (forward kernels, --te)"
        print(f"\n## Device time per kernel (bench/kernel_times.py, torch.profiler), n = {n}, M = {M}, C = {C}{which}\n")
        print("GPU time of each launch, without host overhead (median of 10 calls).\n")
        print("| op | kernel | us |")
        print("| --- | --- | ---: |")
        for k in kt["kernels"]:
            print(f"| {k['op']} | {k['kernel']} | {k['us']} |")


if __name__ == "__main__":
    main()
