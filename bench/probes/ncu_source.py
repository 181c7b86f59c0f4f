"""Where a kernel's warps wait, by role and by instruction: reads Nsight
Compute's source page (`ncu -i REP --page source --csv --print-source sass`,
gzip or plain; bench/probes/any_c_ncu.sh writes it with SOURCE=1) and sums
the warp-state samples of its SASS lines.

A warp-specialised kernel's roles show as execution counts: every line a
role runs once per step (or pair of steps) has the same count, e.g. in the
one-wave backward the consumers' lines run once per pair and warp, the
unpackers' once per step and warp, thread 0's once per step. Lines that
wait on a wgmma (WARPGROUP.DEPBAR) are kept apart.

    python3 bench/probes/ncu_source.py SOURCE.csv[.gz] [--top 20] [--count EXEC]

prints the largest groups (samples, share, static instructions, the main
stall reasons), then the lines with the most samples; with --count, the
opcodes of that group (static count and samples).
"""

import argparse
import collections
import csv
import gzip
import re
import signal

ALL = "Warp Stall Sampling (All Samples)"


def read(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        rows = list(csv.reader(f))
    head = next(i for i, r in enumerate(rows) if "Source" in r and ALL in r)
    hdr = rows[head]
    ix = {h: i for i, h in enumerate(hdr)}
    stalls = [h for h in hdr if h.startswith("stall_") and "(Not" not in h]
    lines = []
    for r in rows[head + 1:]:
        if len(r) < len(hdr):
            continue
        lines.append({
            "sass": r[ix["Source"]].strip(),
            "samples": int(r[ix[ALL]] or 0),
            "count": int(r[ix["Instructions Executed"]] or 0),
            "stalls": {h[len("stall_"):]: int(r[ix[h]] or 0) for h in stalls},
        })
    return lines


def opcode(sass):
    return re.sub(r"^@!?U?P\w+\s+", "", sass).split()[0].split(".")[0]


def reasons(counter, total, k=4):
    return ", ".join(f"{name} {100 * v / total:.1f}%" for name, v in counter.most_common(k) if v)


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # quiet when piped into head
    ap = argparse.ArgumentParser()
    ap.add_argument("source")
    ap.add_argument("--top", type=int, default=20)
    ap.add_argument("--count", type=int, help="an execution count: that group's opcodes")
    a = ap.parse_args()
    lines = read(a.source)
    total = sum(l["samples"] for l in lines) or 1
    print(f"{a.source}: {total} samples over {len(lines)} SASS lines")
    groups = collections.defaultdict(lambda: {"samples": 0, "lines": 0, "stalls": collections.Counter()})
    for l in lines:
        g = groups[(l["count"], "DEPBAR" in l["sass"])]
        g["samples"] += l["samples"]
        g["lines"] += 1
        g["stalls"].update(l["stalls"])
    print("\nexecutions  lines  samples  share  main stall reasons (share of all samples)")
    for (count, depbar), g in sorted(groups.items(), key=lambda kv: -kv[1]["samples"])[:10]:
        label = f"{count}{' wgmma waits' if depbar else ''}"
        print(f"{label:>22s} {g['lines']:5d} {g['samples']:8d} {100 * g['samples'] / total:5.1f}%  "
              f"{reasons(g['stalls'], total)}")
    print(f"\nthe {a.top} lines with the most samples")
    for l in sorted(lines, key=lambda l: -l["samples"])[:a.top]:
        print(f"{l['samples']:7d} {100 * l['samples'] / total:5.1f}% x{l['count']:<9d} {l['sass'][:64]:64s} "
              f"{reasons(collections.Counter(l['stalls']), total, 2)}")
    if a.count is not None:
        ops, hits = collections.Counter(), collections.Counter()
        for l in lines:
            if l["count"] == a.count:
                ops[opcode(l["sass"])] += 1
                hits[opcode(l["sass"])] += l["samples"]
        print(f"\nopcodes of the lines run {a.count} times: static count, share of all samples")
        for op, n in ops.most_common():
            print(f"{op:12s} {n:5d} {100 * hits[op] / total:5.1f}%")
        print(f"{'total':12s} {sum(ops.values()):5d}")


if __name__ == "__main__":
    main()
