"""The decode-size forward in one cooperative launch, for compute-sanitizer:
sanitize.py runs it with every other op; alone (python3 sanitize_serve.py)
it is the quick check of the one-launch kernels."""
import os

import torch

# The one-launch kernel up to 256 tokens (the runtime's benchmark knob): its
# two-barrier path (M past the tile: 37, 256) stays under the sanitizers.
os.environ.setdefault("MHC_ONE_LAUNCH_MAX_TOKENS", "256")
import mhc  # noqa: E402,F401  (loads the ops)


def one_launch():
    """Runs the cases; returns the number of op calls."""
    o, direct = torch.ops.mhc, 0
    # The decode-size forward in one cooperative launch (coop=1, M <= 256 here): the
    # seam and the pre step, both layouts, 2- and 4-byte activations, with
    # bias and weight, then two streams at once (each its own sync words). M <= 16
    # (the tile) takes the decode path (one grid barrier; warp 0's Sinkhorns beside
    # the other warps' y), past it the two-barrier path.
    for layout, dtype, n, C, M in (("cn", torch.bfloat16, 4, 4096, 1), ("cn", torch.bfloat16, 4, 7168, 16),
                                   ("nc", torch.float32, 8, 96, 37), ("nc", torch.bfloat16, 3, 520, 256)):
        N = 2 * n + n * n
        x = torch.randn((M, n, C) if layout == "nc" else (M, C, n), device="cuda", dtype=dtype)
        f = torch.randn(M, C, device="cuda", dtype=dtype)
        post, P = 2 * torch.rand(M, n, device="cuda"), torch.softmax(torch.randn(M, n, n, device="cuda"), -2)
        phi, bias, weight = torch.randn(N, n * C, device="cuda") / C, torch.randn(C, device="cuda"), 1 + torch.rand(n * C, device="cuda")
        alpha, beta = torch.rand(3, device="cuda") + 0.5, torch.randn(N, device="cuda")
        attrs = (n, layout, False, 1e-6, 1e-6, 2.0, "log", 20, 0.0)
        o.post_pre(f, post, x, P, bias, phi, alpha, beta, weight, *attrs)
        o.pre(x, phi, alpha, beta, weight, *attrs)
        direct += 2
        streams = [torch.cuda.Stream() for _ in range(2)]
        for s in streams:
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                o.post_pre(f, post, x, P, bias, phi, alpha, beta, weight, *attrs)
            direct += 1
        for s in streams:
            torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    return direct


if __name__ == "__main__":
    torch.manual_seed(0)
    calls = one_launch()
    print("sanitize_serve: one-launch calls:", calls)
