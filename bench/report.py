"""docs/PERFORMANCE.md, generated from one results file.

    python3 bench/report.py [docs/perf/results.json] > docs/PERFORMANCE.md
    python3 bench/report.py merge OUT.json bench-1.json ... bench-4.json --kernels k_*.json \\
        [--setup key=value ...]
    python3 bench/report.py merge-stack docs/perf/results.json stack.json [--setup key=value ...]
    python3 bench/report.py merge-serve docs/perf/results.json serve.json [more.json ...] [--setup key=value ...]

`merge` gathers one complete run of bench/run-table.sh (its four bench/bench.py
perf.json files and the bench/kernel_times.py files of part 4) into one results
file; --setup records what the JSON files do not know (driver, torch, code
commit). `merge-stack` puts one bench/run-stack.sh run (bench/stack.py's
stack.json: the 4-layer stack) into the results file as its "stack" section,
replacing any earlier one; the page shows the stack's tables only when the
section is there; `merge-serve` likewise puts one bench/run-serve.sh run
(bench/serve.py's serve.json: the seam at decode batch sizes) in as "serve".
test/python/test_docs.py checks that docs/PERFORMANCE.md is what this
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


def combine_runs(runs):
    """Runs of one benchmark on one machine, back to back (e.g. one process per C), as one: their rows and
    skipped configurations in order, their commands as a list; device, torch and columns must agree."""
    first = runs[0]
    for r in runs[1:]:
        for key in ("device", "torch", "columns", "seams"):
            if r.get(key) != first.get(key):
                raise SystemExit(f"report.py: the runs differ in {key}: {first.get(key)} vs {r.get(key)}")
    done = {(row["M"], row["C"]) for r in runs for row in r["rows"]}
    return {**first, "rows": [row for r in runs for row in r["rows"]],
            "skipped": [s for r in runs for s in r.get("skipped", []) if (s["M"], s["C"]) not in done],
            "command": [r["command"] for r in runs], "processes": len(runs)}


def merge_section(section, argv):
    """report.py merge-<section> RESULTS <section>.json ... [--setup key=value ...]: the run (several runs
    of one machine, back to back, combined) as the results file's `section`, replacing any earlier one."""
    results = argv[0]
    files = [a for a in argv[1:] if a.endswith(".json")]
    run = combine_runs([json.load(open(f)) for f in files]) if len(files) > 1 else json.load(open(files[0]))
    setup = dict(arg.split("=", 1) for arg in argv[1:] if arg != "--setup" and not arg.endswith(".json"))
    run["setup"] = {**run.get("setup", {}), **setup}
    with open(results) as f:
        d = json.load(f)
    d[section] = run
    with open(results, "w") as f:
        json.dump(d, f, indent=1)
        f.write("\n")


def merge_stack(argv):
    """report.py merge-stack RESULTS stack.json [--setup key=value ...]"""
    merge_section("stack", argv)


def merge_serve(argv):
    """report.py merge-serve RESULTS serve.json [more.json ...] [--setup key=value ...]"""
    merge_section("serve", argv)


def command(line):
    """A run's command line without this machine's paths (bench.py's runs record their argv, whose
    first word is the script's path; stack.py's its own `python3 bench/stack.py ...`)."""
    toks = line.split()
    script = next((i for i, tok in enumerate(toks) if tok.endswith(".py")), None)
    name = os.path.basename(toks[script]) if script is not None else "bench.py"
    out, prev = [f"python3 bench/{name}"], None
    for tok in toks[script + 1:] if script is not None else toks:
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


STACK_BLOCKS = {"identity": "identity block",
                "linear": "linear block (a bf16 nn.Linear(C, C, bias=False) per layer)"}


def stack_fwd_floor_units(n, layers=4):
    """The forward's fewest bytes per layer of a stack, in units of 2*M*C bytes (one activation plane): a
    seam moves 3n + 2 (docs/design/seam.md); the first layer's pre step reads x twice (the projection, then
    the aggregate) and writes y, 2n + 1; the last post step reads x and f and writes x_{l+1}, 2n + 1. So a
    4-layer stack's floor is (2(2n + 1) + 3(3n + 2)) / 4 = 15 units per layer at n = 4, the seam's 14."""
    return (2 * (2 * n + 1) + (layers - 1) * (3 * n + 2)) / layers


def stack_group(stack, block, M, C):
    return {r["column"]: r for r in stack["rows"] if (r["block"], r["M"], r["C"]) == (block, M, C)}


def stack_targets(stack):
    """Issue 34's targets for the fused stack (identity block), each with its figures; '-' where the
    run lacks a row (a column absent or failed, a configuration skipped)."""
    ok = lambda r: r if r and r.get("status") == "ok" else None
    get = lambda col, M, C: ok(stack_group(stack, "identity", M, C).get(col))
    yes = lambda flags: "-" if not flags or None in flags else "met" if all(flags) else "**not met**"
    cells, flags = [], []
    for C in (7168, 4096):
        m, te = get("mhc fused", 32768, C), get("TE", 32768, C)
        x = te["total_us"] / m["total_us"] if m and te else None
        floor = 1 / m["total_floor"] if m else None
        cells.append(f"C = {C}: " + (f"{x:.2f}x TE" if x else "TE -") + (f", {floor:.2f}x floor" if m else ""))
        flags += [x >= 2.5 if x else None, floor <= 1.45 if m else None]
    yield f"| fwd+bwd per layer >= 2.5x TE default and <= 1.45x the floor | {'; '.join(cells)} | {yes(flags)} |"
    rs = [get("mhc fused", 32768, C) for C in (7168, 4096)]
    seam = [1 / r["fwd_floor"] if r else None for r in rs]
    own = [v * (3 * 4 + 2) / stack_fwd_floor_units(4) if v else None for v in seam]
    yield ("| forward per layer <= 1.1x the floor (the stack's: its seams' and its first pre / last post step's) | "
           + "; ".join("-" if v is None else f"{v:.2f}x ({s:.2f}x the seam floor)" for v, s in zip(own, seam))
           + f" | {yes([v <= 1.1 if v else None for v in own])} |")
    for what in ("saved_bytes", "peak_bytes"):
        pairs = [(get("mhc fused", 32768, C), get("TE", 32768, C)) for C in (7168, 4096)]
        vals = [(m[what], te[what]) if m and te else None for m, te in pairs]
        name = "saved per layer" if what == "saved_bytes" else "peak (stack fwd+bwd)"
        yield (f"| {name} <= TE default's | " + "; ".join("-" if v is None else f"{v[0] / 2**20:.0f} vs {v[1] / 2**20:.0f} MiB"
                                                          for v in vals)
               + f" | {yes([v[0] <= v[1] if v else None for v in vals])} |")
    pairs = [(get("mhc.te acc buffer", 32768, C), get("mhc.te", 32768, C)) for C in (7168, 4096)]
    vals = [(b["total_us"], p["total_us"]) if b and p else None for b, p in pairs]
    yield ("| mhc.te with the fp32 buffer faster than without (issue 35; bound: docs/design/project.md, acc) | "
           + "; ".join("-" if v is None else f"{v[0]:.0f} vs {v[1]:.0f} us" for v in vals)
           + f" | {yes([v[0] < v[1] if v else None for v in vals])} |")
    r = get("mhc fused", 128, 4096)
    yield (f"| backward per layer at M = 128, C = 4096 <= 120 us (from PyTorch) | "
           + (f"{r['bwd_us']:.1f} us" if r else "-") + f" | {yes([r['bwd_us'] <= 120] if r else [])} |")


def stack_table(stack, block, M, C):
    """One configuration: each column per layer, % of the seam floor, TE's time over it, memory."""
    group, bw = stack_group(stack, block, M, C), stack["copy_bandwidth"]
    fwd, bwd = (3 * 4 + 2) * 2 * M * C, (3 * 4 + 3) * 2 * M * C
    yield f"\n### {STACK_BLOCKS[block]}, M = {M}, C = {C}\n"
    first = next((r for r in group.values() if r["status"] == "ok"), None)
    alone = (f" The block alone: fwd {first['block_fwd_us']:.1f} us, bwd {first['block_bwd_us']:.1f} us (taken off"
             " the time for % floor)." if first and first["block_fwd_us"] else "")
    yield f"Floor per layer: fwd {fwd / bw * 1e6:.1f} us, bwd {bwd / bw * 1e6:.1f} us.{alone}\n"
    yield ("| column | fwd us | bwd us | fwd+bwd us | % floor fwd | % floor bwd | % floor fwd+bwd | x TE fwd+bwd"
           " | saved MiB/layer | held MiB/layer | peak MiB |")
    yield "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    te = group.get("TE") if group.get("TE", {}).get("status") == "ok" else None
    pct = lambda v: f"{v:.0%}" if v is not None else "-"
    mib = lambda v, digits=0: f"{v / 2**20:.{digits}f}" if v is not None else "-"
    for name, r in group.items():
        if r["status"] != "ok":
            yield f"| {name} | {status_word(r['status'])} | | | | | | | | | |"
            continue
        x = f"{te['total_us'] / r['total_us']:.2f}" if te else "-"
        yield (f"| {name} | {r['fwd_us']:.1f} | {r['bwd_us']:.1f} | {r['total_us']:.1f} | {pct(r['fwd_floor'])}"
               f" | {pct(r['bwd_floor'])} | {pct(r['total_floor'])} | {x} | {mib(r['saved_bytes'], 1)}"
               f" | {mib(r['held_bytes'], 1)} | {mib(r['peak_bytes'])} |")


def stack_section(stack):
    """The 4-layer stack of bench/stack.py, from the results file's "stack" section."""
    setup = stack.get("setup", {})
    yield "\n## A 4-layer stack\n"
    yield (f"**Setup.** bench/stack.py in one process on {stack['device']}, {stack['date']}; copy bandwidth"
           f" {stack['copy_bandwidth'] / 1e12:.2f} TB/s; mhc {setup.get('mhc', stack.get('mhc_revision') or '?')};"
           f" torch {stack['torch']}; Transformer Engine {setup.get('te', stack.get('te_revision') or stack['te'])}.\n")
    yield ("**Method.** n = 4, bf16 activations, fp32 mixing and parameters, TE's conventions (as above); every column"
           " runs the same 4 layers with the same parameters and blocks. mhc fused = `HyperConnectionStack(...,"
           " fused=True)` (one seam op per layer boundary), mhc unfused = `fused=False` (the per-layer"
           " HyperConnection path), TE = its `mhc_generate_mix_and_aggregate` and `mhc_fused_expand_combine` per layer,"
           " TE acc buffer = the same with an fp32 `fused_grad_x_acc_buffer` per layer, mhc.te / mhc.te acc buffer ="
           " the TE columns' layer on `mhc.te` (x's gradient summed in the backward kernels with the buffer),"
           " torch.compile = the plain"
           " PyTorch pre step and post step, each compiled. Times are per layer (the stack's / 4): the forward with"
           " autograd recording, backward = (forward + backward) - forward through torch.autograd.grad of x and"
           " every parameter. % floor = the seam's fewest bytes, forward (3n + 2)*2*M*C and backward"
           " (3n + 3)*2*M*C (docs/design/seam.md), at the copy bandwidth, over the time (with the linear block,"
           " the time less the block's own). x TE = TE's fwd+bwd time / the column's (above 1: faster). Saved ="
           " the distinct storages autograd saves for backward, parameters left out; held = what the forward"
           " leaves allocated besides its output (also tensors kept outside autograd's saved tensors, such as TE's"
           " buffer); peak = max_memory_allocated over one forward + backward of the stack, above what was"
           " allocated before it. Each column returns what it allocated before the next starts (the run's log"
           " prints torch.cuda.memory_allocated() after each).\n")
    yield "| target (identity block, M = 32768) | measured | |"
    yield "| --- | --- | --- |"
    yield from stack_targets(stack)
    for block, M, C in dict.fromkeys((r["block"], r["M"], r["C"]) for r in stack["rows"]):
        yield from stack_table(stack, block, M, C)
    if stack.get("skipped"):
        yield ("\nNot measured in this run (past its time budget): "
               + "; ".join(f"{s['block']} M = {s['M']}, C = {s['C']}" for s in stack["skipped"]) + ".")


def serve_row(serve, M, C, column):
    r = next((r for r in serve["rows"] if (r["M"], r["C"], r["column"]) == (M, C, column)), None)
    return r if r and r.get("status") == "ok" else None


def serve_targets(serve):
    """Issue 36's targets for the fused seam, each with its figures; '-' where the run lacks the row."""
    yes = lambda flags: "-" if not flags or None in flags else "met" if all(flags) else "**not met**"
    fused = lambda M, C: serve_row(serve, M, C, "mhc fused")
    small = [(M, C, fused(M, C)) for C in (4096, 7168) for M in (1, 4, 16)]
    yield ("| seam in a CUDA graph <= 8 us at M <= 16 | "
           + "; ".join(f"M = {M}, C = {C}: " + (f"{r['graph_us']:.1f}" if r else "-") for M, C, r in small)
           + f" | {yes([r['graph_us'] <= 8 if r else None for _, _, r in small])} |")
    r = fused(128, 7168)
    yield (f"| seam in a CUDA graph <= 12 us at M = 128, C = 7168 | {r['graph_us']:.1f} us" if r else
           "| seam in a CUDA graph <= 12 us at M = 128, C = 7168 | -") + f" | {yes([r['graph_us'] <= 12] if r else [])} |"
    eager = [(M, C, fused(M, C)) for C in (4096, 7168) for M in (1, 4, 16, 64, 128)]
    yield ("| eager from PyTorch <= 20 us per seam at M <= 128 | "
           + "; ".join(f"M = {M}, C = {C}: " + (f"{r['eager_us']:.1f}" if r else "-") for M, C, r in eager)
           + f" | {yes([r['eager_us'] <= 20 if r else None for _, _, r in eager])} |")


def serve_section(serve):
    """The seam at decode batch sizes of bench/serve.py, from the results file's "serve" section."""
    setup = serve.get("setup", {})
    columns = serve["columns"]
    yield "\n## The layer seam at decode batch sizes (inference)\n"
    where = (f"in {serve['processes']} processes back to back (one per command)" if serve.get("processes", 1) > 1
             else "in one process")
    yield (f"**Setup.** bench/serve.py {where} on {serve['device']}, {serve['date']};"
           f" mhc {setup.get('mhc', serve.get('mhc_revision') or '?')}; torch {serve['torch']};"
           f" Transformer Engine {setup.get('te', serve.get('te_revision') or serve['te'])}.\n")
    yield ("**Method.** The seam = layer l's post step then layer l+1's pre step, forward only; n = 4, bf16"
           " activations, fp32 mixing and parameters, TE's conventions. Each column runs a chain of"
           f" {serve['seams']} seams through identity blocks. graph = the chain captured in one CUDA graph, CUDA"
           " events around each replay (median), per seam; eager = the chain called from PyTorch under no_grad,"
           " back to back, wall clock per seam (the larger of host and GPU time). mhc fused ="
           " `mhc.inference.post_pre` into preallocated outputs; mhc post_pre = `mhc.post_pre` (allocates);"
           " mhc unfused = `mhc.inference.post` then `mhc.inference.pre`; TE = its `mhc_fused_expand_combine` then"
           " `mhc_generate_mix_and_aggregate`; torch.compile = the plain PyTorch seam, compiled.\n")
    yield "| target | measured (us per seam) | |"
    yield "| --- | --- | --- |"
    yield from serve_targets(serve)
    yield "\nus per seam, graph / eager:\n"
    yield "| M | C | " + " | ".join(columns) + " |"
    yield "| ---: | ---: |" + " ---: |" * len(columns)
    for M, C in dict.fromkeys((r["M"], r["C"]) for r in serve["rows"]):
        cells = []
        for c in columns:
            r = next((r for r in serve["rows"] if (r["M"], r["C"], r["column"]) == (M, C, c)), None)
            if r is None:
                cells.append("-")
            elif r["status"] != "ok":
                cells.append(status_word(r["status"]))
            else:
                graph = f"{r['graph_us']:.1f}" if r.get("graph_us") is not None else "-"
                cells.append(f"{graph} / {r['eager_us']:.1f}")
        yield f"| {M} | {C} | " + " | ".join(cells) + " |"
    if serve.get("skipped"):
        yield ("\nNot measured in this run (past its time budget): "
               + "; ".join(f"M = {s['M']}, C = {s['C']}" for s in serve["skipped"]) + ".")


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
    if "stack" in d:
        yield from stack_section(d["stack"])
    if "serve" in d:
        yield from serve_section(d["serve"])
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
    if "stack" in d:
        yield ("\nThe stack: `bash bench/run-stack.sh <TE checkout>` (one call), then `python3 bench/report.py"
               " merge-stack docs/perf/results.json stack.json --setup mhc=... te=...`; its run:"
               f" `{command(d['stack']['command'])}`")
    if "serve" in d:
        cmds = d["serve"]["command"]
        cmds = cmds if isinstance(cmds, list) else [cmds]
        yield ("\nThe seam at decode sizes: `bash bench/run-serve.sh <TE checkout> [--config M,C ...]` (one call"
               " per run), then `python3 bench/report.py merge-serve docs/perf/results.json serve.json [more.json"
               " ...] --setup mhc=... te=...`; " + ("its run: " if len(cmds) == 1 else "its runs: ")
               + "; ".join(f"`{command(c)}`" for c in cmds))


def status_word(status):
    """A row's status as the table says it: 'absent', 'failed', 'failed: out of memory'."""
    word = status.split(":")[0]
    return f"{word}: out of memory" if "OutOfMemoryError" in status else word


def main(argv):
    if argv and argv[0] == "merge":
        return merge(argv[1:])
    if argv and argv[0] == "merge-stack":
        return merge_stack(argv[1:])
    if argv and argv[0] == "merge-serve":
        return merge_serve(argv[1:])
    with open(argv[0] if argv else RESULTS) as f:
        print("\n".join(report(json.load(f))))


if __name__ == "__main__":
    main(sys.argv[1:])
