"""One launch vs the multi-launch path at decode sizes (issue 36): where kOneLaunchMaxTokens belongs.

    python3 bench/probes/one_launch_probe.py [--ms 1,4,16,...] [--cs 4096,7168]

Runs itself twice, with MHC_ONE_LAUNCH_MAX_TOKENS=0 (the multi-launch path at every M) and =256 (the
one-launch kernel up to 256 tokens; the runtime's benchmark knob), and prints per (C, M) side by side:
- the seam (mhc.inference.post_pre, out=; bench/serve.py's "mhc fused" chain of 8 seams): CUDA-graph
  replay time per seam and eager time per seam;
- the 4-layer training stack's forward (HyperConnectionStack of identity blocks, TE conventions,
  requires_grad input): eager wall time per layer.
n = 4, bf16 activations, fp32 phi, layout (C, n). Prints a table; writes nothing.
"""
import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from children import child_rows  # noqa: E402  (beside this file)
PATHS = {"multi": "0", "one": "256"}


def stack_fwd_us(C, M, device):
    import torch
    import mhc
    import stack
    blocks = [torch.nn.Identity() for _ in range(4)]
    st = mhc.HyperConnectionStack(blocks, stack.STREAMS, C, fused=True, device=device, **stack.MHC_CONVENTIONS)
    x = torch.randn(M, C, stack.STREAMS, device=device, dtype=torch.bfloat16, requires_grad=True)
    for _ in range(10):
        st(x)
    torch.cuda.synchronize()
    reps = 100
    start = time.perf_counter()
    for _ in range(reps):
        st(x)
    torch.cuda.synchronize()
    return (time.perf_counter() - start) * 1e6 / reps / 4


def child(ms, cs):
    import torch
    import serve
    device = torch.device("cuda")
    rows = []
    for C, M, _, args, chain in serve.fused_configs(cs, ms, device):
        with torch.no_grad():
            first = [t.clone() for t in chain(*args, seams=1)]
            row = dict(C=C, M=M, eager=serve.eager_us(chain, args, device), graph=serve.graph_us(chain, args),
                       y_abs_max=float(first[1].float().abs().max()))
        row["stack_fwd"] = stack_fwd_us(C, M, device)
        rows.append(row)
        print("ROW " + json.dumps(row), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ms", default="1,4,16,32,64,128,256")
    ap.add_argument("--cs", default="4096,7168")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    ms, cs = [int(v) for v in a.ms.split(",")], [int(v) for v in a.cs.split(",")]
    if a.child:
        return child(ms, cs)
    results = {}
    for name, limit in PATHS.items():
        env = dict(os.environ, MHC_ONE_LAUNCH_MAX_TOKENS=limit)
        rows = child_rows(name, [__file__, "--child", "--ms", a.ms, "--cs", a.cs], env)
        results.update({(name, C, M): r for (C, M), r in rows.items()})
    print("us per seam (graph, eager) and per layer (training stack forward); multi = MHC_ONE_LAUNCH_MAX_TOKENS=0,"
          " one = 256")
    print(f"{'C':>5} {'M':>4} | {'graph multi':>11} {'graph one':>9} | {'eager multi':>11} {'eager one':>9} |"
          f" {'stack multi':>11} {'stack one':>9}")
    for C in cs:
        for M in ms:
            m, o = results.get(("multi", C, M)), results.get(("one", C, M))
            cell = lambda r, k: f"{r[k]:.1f}" if r else "-"
            print(f"{C:>5} {M:>4} | {cell(m, 'graph'):>11} {cell(o, 'graph'):>9} | {cell(m, 'eager'):>11}"
                  f" {cell(o, 'eager'):>9} | {cell(m, 'stack_fwd'):>11} {cell(o, 'stack_fwd'):>9}")


if __name__ == "__main__":
    main()
