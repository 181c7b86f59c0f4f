"""One size per op, forward and backward, for compute-sanitizer."""
import os

import torch

# The one-launch kernel up to 256 tokens (the runtime's benchmark knob), as
# the threshold stood before its measurement: its multi-tile path (M = 37,
# 256 below) stays under the sanitizers.
os.environ.setdefault("MHC_ONE_LAUNCH_MAX_TOKENS", "256")
import mhc  # noqa: E402
import sanitize_serve  # noqa: E402

torch.manual_seed(0)
for layout in ("nc", "cn"):
    for dtype in (torch.bfloat16, torch.float32):
        M, n, C = 7, 4, 2048
        hc = mhc.HyperConnection(n, C, layout=layout, bias=True, mode="log" if dtype == torch.float32 else "softmax_eps").cuda()
        x = torch.randn((M, n, C) if layout == "nc" else (M, C, n), device="cuda", dtype=dtype, requires_grad=True)
        out = hc(x, lambda y: y * 2)
        out.float().sum().backward()
# The tf32 forms on sm_90: n = 4 (mma.sync from the bulk-copy ring; without
# a norm weight its paced producer warp) and n = 8 (wgmma forward; the
# backward's mma.sync ring with a norm weight, without one its one-wave
# kernel (as for n = 6; at C = 256 one box per block, the second consumer
# idle, the ring wrapping) or, at C = 2192 (274 boxes of 64 columns, no
# one-wave split), its warp-specialised TMA/wgmma kernel), with a partial
# last token block and several chunks.
for n, weight, C in ((4, True, 256), (4, False, 256), (8, True, 256), (8, False, 256), (6, False, 256),
                     (8, False, 2192)):
    # (n = 4 without a weight paces its blocks from 12288 tokens on at
    # C = 256: 64 token shares.)
    M = 12300 if (n, weight) == (4, False) else 300
    hc = mhc.HyperConnection(n, C, layout="cn", tf32=True, norm_weight=weight).cuda()
    x = torch.randn((M, C, n), device="cuda", dtype=torch.bfloat16, requires_grad=True)
    out = hc(x, lambda y: y * 2)
    out.float().sum().backward()
    # Without a graph the fused pre step keeps no intermediates (they stay in
    # its workspace).
    with torch.no_grad():
        hc(x, lambda y: y * 2)
# x's gradient summed in the backward kernels (acc): aggregate's and
# expand_combine's backward on their token rings (n = 4, (C, n), bf16) and
# per-token blocks (f32) with acc; the projection's one-wave and wgmma
# kernels with acc (their launch "acc" after them, or in the one-wave
# kernel's stores in pieces) and without.
o, direct = torch.ops.mhc, 0
for layout, dtype in (("cn", torch.bfloat16), ("nc", torch.float32)):
    M, n, C = 7, 4, 2048
    x, acc = (torch.randn((M, n, C) if layout == "nc" else (M, C, n), device="cuda", dtype=dtype) for _ in range(2))
    f = torch.randn(M, C, device="cuda", dtype=dtype)
    pre, post, P = (torch.rand(shape, device="cuda") for shape in ((M, n), (M, n), (M, n, n)))
    o.aggregate_backward(f, x, pre, n, layout, acc)
    o.expand_combine_backward(acc, f, post, x, P, None, n, layout, acc)
    direct += 2
# n = 6: the one-wave kernel in 8- and 4-byte pieces; n = 2, C = 257: the
# block ring at 4-byte rows.
for n, C in ((8, 256), (8, 2192), (6, 258), (6, 257), (2, 257)):
    M, N = 300, 2 * n + n * n
    x = torch.randn(M, C, n, device="cuda", dtype=torch.bfloat16)
    args = (torch.randn(M, N, device="cuda"), torch.randn(M, device="cuda"), x,
            torch.randn(N, n * C, device="cuda"), None, n, "cn", True)
    o.project_backward(*args)
    o.project_backward(*args, torch.randn_like(x))
    direct += 2
    if n != 8:  # the staged forward at 8- and 4-byte rows
        o.project(x, args[3], None, n, "cn", True)
        direct += 1
# The layer seam's backward, n = 4, bf16, (C, n) (on sm_90a the fused one:
# the token pass and aggregate's gx in the projection backward), at the
# benchmark's conventions (tf32, no weight) and precise with a weight and
# bias; a partial last token block, C off the kernels' column blocks.
for tf32, weight, bias, C, M in ((True, False, False, 1000, 300), (False, True, True, 1002, 7)):
    n, N, K = 4, 24, 4 * C
    bf = dict(device="cuda", dtype=torch.bfloat16)
    f, x = torch.randn(M, C, **bf), torch.randn(M, C, n, **bf)
    post, P = torch.rand(M, n, device="cuda"), torch.softmax(torch.randn(M, n, n, device="cuda"), -2)
    phi = torch.randn(N, K, device="cuda") * K ** -0.5
    alpha, beta = torch.rand(3, device="cuda") + 0.5, torch.randn(N, device="cuda")
    b = torch.randn(C, device="cuda") if bias else None
    w = 1 + 0.1 * torch.randn(K, device="cuda") if weight else None
    seam_attrs = (n, "cn", tf32, 1e-6, 1e-6, 2.0, "log", 20, 0.0)
    x_next, h, ms, pre, post_next, logits, P_next, y = o.post_pre_saved(f, post, x, P, b, phi, alpha, beta, w,
                                                                         *seam_attrs)
    o.post_pre_backward(torch.randn_like(x_next), torch.randn_like(y), torch.randn_like(post_next),
                        torch.randn_like(P_next), f, post, x, P, b, x_next, h, ms, pre, logits, phi, alpha, beta, w,
                        *seam_attrs)
    direct += 2
# The decode-size forward in one cooperative launch (sanitize_serve.py).
direct += sanitize_serve.one_launch()
torch.cuda.synchronize()
# Per layer with grad: the fused pre step, expand_combine and five backwards
# (7); without: 2. Four layers above, six here; then the direct calls.
stats = mhc._C.stats()
assert stats["reference_calls"] == 0 and stats["kernel_calls"] == 10 * 7 + 6 * 2 + direct, stats
print("sanitize: ran every op forward and backward through its kernel:", stats)
