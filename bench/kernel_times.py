"""Device time of each mhc kernel, apart from host overhead: runs each op's
forward and backward under torch.profiler and prints the CUDA time per kernel
(median over the calls). With --te, the forward kernels of Transformer
Engine's Triton implementation instead (an outside checkout, as in bench.py;
forward only: its scale backward rejects the unpadded logits this script's
autograd hands it). For the GPU machine:

    python3 bench/kernel_times.py [--shape n,M,C] [--ops project,...] [--te PATH]
"""

import argparse
import collections
import json
import statistics

import torch
from torch.profiler import ProfilerActivity, profile

import bench


def device_times(fn, calls):
    """Microseconds of each CUDA kernel launch of `calls` calls of fn() (after 3 warm-up calls) under the
    torch profiler, as {kernel name: [us of each launch]}. (bench/probes/seam_bwd_kernels.py uses it too.)"""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    times = collections.defaultdict(list)
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            times[e.name].append(e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total)
    return times


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="4,32768,7168", metavar="n,M,C")
    ap.add_argument("--ops", default="project,scale,sinkhorn,aggregate,expand_combine")
    ap.add_argument("--calls", type=int, default=10)
    ap.add_argument("--json", default=None, help="also write the times here")
    ap.add_argument("--te", default=None, metavar="PATH", help="time TE's kernels (outside checkout) instead")
    a = ap.parse_args()
    name = "TE" if a.te else "mhc"
    result = dict(device=torch.cuda.get_device_name(), shape=a.shape, impl=name, kernels=[])
    n, M, C = (int(v) for v in a.shape.split(","))
    impl = bench.load_te(a.te) if a.te else bench.mhc_ops()
    s = bench.make_set(M, n, C)
    print(f"{torch.cuda.get_device_name()}, {name}, n={n} M={M} C={C}, bf16, TE conventions; "
          f"median of {a.calls} calls")
    for op in a.ops.split(","):
        args = [t.detach().requires_grad_() if isinstance(t, torch.Tensor) and t.is_floating_point() else t
                for t in bench.args_of(op, s, n, name)]
        leaves = [t for t in args if isinstance(t, torch.Tensor) and t.requires_grad]

        def step():
            out = impl[op](*args)
            outs = [o for o in (out if isinstance(out, (tuple, list)) else (out,)) if o.requires_grad]
            if not a.te:
                torch.autograd.grad(outs, leaves, bench.grads_like(outs))

        times = device_times(step, a.calls)
        for name, ts in sorted(times.items(), key=lambda kv: -statistics.median(kv[1])):
            short = name if len(name) < 70 else name[:67] + "..."
            print(f"  {op:15s} {short:70s} {statistics.median(ts):9.1f} us  x{len(ts) // a.calls}")
            result["kernels"].append(dict(op=op, kernel=name, us=round(statistics.median(ts), 1)))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
