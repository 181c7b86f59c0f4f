"""Small-M probe (issues 34, 36): the seam forward eager and in a CUDA graph, and the
per-layer backward's launches and host time at M = 128. Prints a table; writes nothing.

    python3 bench/probes/small_m_probe.py [--stack-only (the stack's wall times alone, e.g. for A/B runs)]
"""
import sys
import time

import torch

import mhc

DEV = "cuda"
CONV = dict(layout="cn", norm_weight=False, bias=False, tf32=True, mode="log", iters=20,
            norm_eps=1.1920929e-07, pre_eps=0.0, post_mult=2.0)


def stack(C, fused=True):
    return mhc.HyperConnectionStack([torch.nn.Identity() for _ in range(4)], 4, C, fused=fused,
                                    device=DEV, **CONV)


def wall(fn, reps=200):
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(reps):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / reps * 1e6


def seam_args(M, C):
    hc = mhc.HyperConnection(4, C, device=DEV, **CONV)
    f = torch.randn(M, C, device=DEV, dtype=torch.bfloat16)
    x = torch.randn(M, C, 4, device=DEV, dtype=torch.bfloat16)
    post = torch.rand(M, 4, device=DEV)
    P = torch.rand(M, 4, 4, device=DEV)
    return hc, (f, (post, x, P))


def seam_rows():
    for C in (4096, 7168):
        for M in (1, 16, 128, 256):
            hc, (f, state) = seam_args(M, C)
            with torch.no_grad():
                eager = wall(lambda: hc.post_pre(f, state, hc))
                post_eager = wall(lambda: hc.post(f, state))
                y, _ = hc.pre(state[1])
                pre_eager = wall(lambda: hc.pre(state[1]))
                s = torch.cuda.Stream()
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    for _ in range(3):
                        hc.post_pre(f, state, hc)
                torch.cuda.current_stream().wait_stream(s)
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    for _ in range(8):
                        hc.post_pre(f, state, hc)
                per = wall(g.replay, 100) / 8
            print(f"seam C={C} M={M}: eager {eager:.1f} us, graph {per:.1f} us/seam; pre eager {pre_eager:.1f}, post eager {post_eager:.1f}", flush=True)


def backward_profile(C=4096, M=128, profile_it=True):
    st = stack(C)
    x = torch.randn(M, C, 4, device=DEV, dtype=torch.bfloat16, requires_grad=True)
    params = [p for p in st.parameters()]

    def step():
        out = st(x)
        torch.autograd.grad(out, [x] + params, torch.ones_like(out))

    def fwd():
        st(x)

    tf, tb = wall(fwd, 50), wall(step, 50)
    print(f"stack M={M} C={C}: fwd {tf/4:.1f} us/layer, fwd+bwd {tb/4:.1f}, bwd {(tb-tf)/4:.1f} us/layer (wall, eager)")
    # The autograd engine runs CUDA nodes on its device thread: two thread hand-offs per backward.
    with torch.autograd.set_multithreading_enabled(False):
        tf1, tb1 = wall(fwd, 50), wall(step, 50)
    print(f"stack M={M} C={C}, backward on the calling thread (torch.autograd.set_multithreading_enabled(False)): "
          f"fwd {tf1/4:.1f} us/layer, fwd+bwd {tb1/4:.1f}, bwd {(tb1-tf1)/4:.1f} us/layer (wall, eager)")
    if not profile_it:
        return
    from torch.profiler import profile, ProfilerActivity
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            step()
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=30))


if __name__ == "__main__":
    print(torch.cuda.get_device_name())
    if "--stack-only" in sys.argv[1:]:
        for _ in range(3):
            backward_profile(profile_it=False)
        raise SystemExit(0)
    seam_rows()
    backward_profile()
    print(mhc._C.stats())
