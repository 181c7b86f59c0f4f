"""The pre step's backward (issue 35, TE's fused_grad_x_acc_buffer): one call
of torch.ops.mhc.pre_backward (pre.bwd on the flagship: aggregate's x
gradient folded into the projection backward) against the separate ops'
chain it replaces (aggregate_backward / aggregate_backward_into, sinkhorn,
scale, project_backward with aggregate's gx as acc), with no acc and with
TE's f32 buffer; n = 4, bf16, (C, n), tf32, no weight (the stack
benchmark's conventions). CUDA-event time per call, median over calls.
Prints a table; writes nothing.

    python3 bench/probes/pre_bwd.py [--shape 32768,7168] [--calls 10]
"""
import argparse
import statistics

import torch

import mhc  # noqa: F401  (registers torch.ops.mhc)

ATTRS = (4, "cn", True, torch.finfo(torch.float32).eps, 0.0, 2.0, "log", 20, 0.0)


def inputs(M, C, n=4):
    N, K = 2 * n + n * n, n * C
    x = torch.randn(M, C, n, device="cuda", dtype=torch.bfloat16)
    phi = torch.randn(N, K, device="cuda") * K ** -0.5
    alpha, beta = torch.rand(3, device="cuda") + 0.5, torch.randn(N, device="cuda") * 0.5
    with torch.no_grad():
        y, post, P, h, ms, pre, logits = torch.ops.mhc.pre_saved(x, phi, alpha, beta, None, *ATTRS)
    return dict(x=x, phi=phi, alpha=alpha, beta=beta, h=h, ms=ms, pre=pre, logits=logits,
                gy=torch.randn_like(y), gpost=torch.randn_like(post), gP=torch.randn_like(P))


def fused(t, acc):
    return torch.ops.mhc.pre_backward(t["gy"], t["gpost"], t["gP"], t["x"], t["h"], t["ms"], t["pre"], t["logits"],
                                      t["phi"], t["alpha"], t["beta"], None, acc, *ATTRS)


def composed(t, acc):
    """The chain as mhc.te and the Pre node ran it before pre.bwd (with the
    buffer: aggregate adds into it in place, project reads it)."""
    n, layout, tf32, ne, pe, pm, mode, iters, eps = ATTRS
    o = torch.ops.mhc
    if acc is None:
        g1, gpre = o.aggregate_backward(t["gy"], t["x"], t["pre"], n, layout, None)
    else:
        g1, gpre = acc, o.aggregate_backward_into(t["gy"], t["x"], t["pre"], n, layout, buffer=acc)
    glogits = o.sinkhorn_backward(t["gP"], t["logits"], n, mode, iters, eps)
    gh, gms, galpha, gbeta = o.scale_backward(gpre, t["gpost"], glogits, t["h"], t["ms"], t["alpha"], t["beta"],
                                              n, ne, pe, pm)
    return o.project_backward(gh, gms, t["x"], t["phi"], None, n, layout, tf32, g1)


def time_us(fn, calls):
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(calls):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="32768,7168", metavar="M,C")
    ap.add_argument("--calls", type=int, default=10)
    a = ap.parse_args()
    M, C = (int(v) for v in a.shape.split(","))
    t = inputs(M, C)
    buffer = torch.randn(t["x"].shape, device="cuda")
    print(f"{torch.cuda.get_device_name()}, pre step backward, n=4 M={M} C={C} bf16 cn tf32; "
          f"median of {a.calls} calls (us)")
    for label, acc in (("no acc", None), ("f32 buffer", buffer)):
        # (the separate ops add aggregate's part into the buffer each call: its values drift, not the time)
        one = time_us(lambda: fused(t, acc), a.calls)
        two = time_us(lambda: composed(t, None if acc is None else buffer), a.calls)
        print(f"  {label:10s}  pre_backward {one:9.1f}  separate ops {two:9.1f}  ratio {one / two:.3f}")


if __name__ == "__main__":
    main()
