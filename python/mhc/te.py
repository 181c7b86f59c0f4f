"""Transformer Engine's mHC function names, argument order and layout.

A user of transformer_engine.pytorch.triton.mhc can switch by changing the
import. TE's conventions: x is (s, b, C, n) (stream-minor, our layout "cn"),
the projection takes x flattened to (M, n*C), norm_eps = FLT_EPSILON, no eps
on pre, post multiplier 2, log-domain Sinkhorn with 20 iterations.

Differences, by design: the projection returns H as (M, 2n + n^2) (TE pads it
to 32 columns; every consumer here and in TE reads the first N); any n from 1
to 8 works (TE asserts n = 4); results are deterministic without a split-K
switch; `fused_grad_x_acc_buffer` is not supported (autograd sums x's three
gradient contributions), so passing one raises.
"""

import torch

from . import ops

_FLT_EPSILON = torch.finfo(torch.float32).eps


def _no_acc_buffer(buffer):
    if buffer is not None:
        raise ValueError("fused_grad_x_acc_buffer is not supported by mhc: autograd accumulates x's "
                         "gradient; pass None")


def mhc_fused_projection(x, phi, use_tf32=True, norm_weight=None, fused_grad_x_acc_buffer=None,
                         use_split_k=False):
    """H (M, N) and ms (M,) for x (M, n*C) in TE's (C, n) order and phi (N, n*C)."""
    _no_acc_buffer(fused_grad_x_acc_buffer)
    if x.dim() != 2:
        raise ValueError(f"argument 'x' must be (M, n*C); got {tuple(x.shape)}")
    n = ops._streams_from_logits(phi.shape[0])
    if x.shape[1] % n:
        raise ValueError(f"argument 'x' has {x.shape[1]} columns, not a multiple of n = {n}")
    x3 = x.reshape(x.shape[0], x.shape[1] // n, n)
    return ops.project(x3, phi, norm_weight, layout="cn", tf32=use_tf32)


def mhc_fused_scale(H, alpha, beta, ms, n):
    """(h_pre, h_post, h_res) with TE's constants; h_res is (M, n*n)."""
    N = ops._num_logits(n)
    h = H[..., :N]
    pre, post, logits = ops.scale(h, ms, alpha, beta.reshape(-1), norm_eps=_FLT_EPSILON, pre_eps=0.0,
                                  post_mult=2.0)
    return pre, post, logits.reshape(*logits.shape[:-2], n * n)


def mhc_fused_sinkhorn(H_res, n=4, recompute_hist=True, iters=20):
    """Log-domain Sinkhorn of H_res (..., n, n). The backward always recomputes."""
    return ops.sinkhorn(H_res.reshape(*H_res.shape[:-2], n, n) if H_res.shape[-1] != n else H_res,
                        mode="log", iters=iters)


def mhc_fused_aggregate(x, H_pre, n, use_tf32=True, fused_grad_x_acc_buffer=None):
    """out (..., C) = sum_i x[..., C, i] H_pre[..., i]."""
    _no_acc_buffer(fused_grad_x_acc_buffer)
    return ops.aggregate(x, H_pre, layout="cn")


def mhc_fused_expand_combine(f, bias, H_post, x, H_res, n, use_tf32=True, fused_grad_x_acc_buffer=None):
    """out (..., C, n) = (f + bias) H_post + x H_res."""
    _no_acc_buffer(fused_grad_x_acc_buffer)
    return ops.expand_combine(f, H_post, x, H_res, bias, layout="cn")


def mhc_generate_mix_and_aggregate(x, phi, alpha, beta, norm_weight=None, use_tf32=True,
                                   fused_grad_x_acc_buffer=None, use_split_k=False):
    """TE's composed pre step: (out (s, b, C), H_post (s, b, n), H_res (s, b, n, n))."""
    _no_acc_buffer(fused_grad_x_acc_buffer)
    return ops.pre(x, phi, alpha, beta.reshape(-1), norm_weight, layout="cn", tf32=use_tf32,
                   norm_eps=_FLT_EPSILON, pre_eps=0.0, post_mult=2.0, mode="log", iters=20)
