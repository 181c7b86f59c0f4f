"""MATH.md in PyTorch: the reference every kernel is compared with.

Every function takes tensors of any dtype and device, computes in the dtype of
its inputs (call with float64 tensors for the float64 reference), and follows
MATH.md literally. Gradients of the reference are autograd's gradients of the
exact discrete forward, which is what the backward kernels must compute.

Layouts: x is [M, n, C] ("nc") or [M, C, n] ("cn"); xvec is x's K = n*C values
in memory order, and phi's columns follow that order.
"""

import torch


def streams(x, layout):
    """x as [M, n, C] whatever its layout."""
    return x if layout == "nc" else x.transpose(1, 2)


def from_streams(s, layout):
    return s if layout == "nc" else s.transpose(1, 2)


def project(x, phi, weight=None):
    xvec = x.reshape(x.shape[0], phi.shape[1])  # (not -1: ambiguous for M = 0)
    xw = xvec if weight is None else xvec * weight
    h = xw @ phi.t()
    ms = (xvec * xvec).mean(dim=-1)
    return h, ms


def scale(h, ms, alpha, beta, n, norm_eps=1e-6, pre_eps=1e-6, post_mult=2.0):
    r = torch.rsqrt(ms + norm_eps)
    seg = torch.cat([alpha[0].expand(n), alpha[1].expand(n), alpha[2].expand(n * n)])
    z = seg * h * r[:, None] + beta
    pre = torch.sigmoid(z[:, :n]) + pre_eps
    post = post_mult * torch.sigmoid(z[:, n:2 * n])
    logits = z[:, 2 * n:].reshape(z.shape[0], n, n)
    return pre, post, logits


def sinkhorn(logits, mode="log", iters=20, eps=1e-6):
    L = logits
    if mode == "log":
        f = torch.zeros_like(L[..., :, 0])
        g = torch.zeros_like(L[..., 0, :])
        for _ in range(iters):
            f = -torch.logsumexp(L + g[..., None, :], dim=-1)
            g = -torch.logsumexp(L + f[..., :, None], dim=-2)
        return torch.exp(f[..., :, None] + L + g[..., None, :])
    P = torch.softmax(L, dim=-1) + eps
    P = P / (P.sum(dim=-2, keepdim=True) + eps)
    for _ in range(iters - 1):
        P = P / (P.sum(dim=-1, keepdim=True) + eps)
        P = P / (P.sum(dim=-2, keepdim=True) + eps)
    return P


def aggregate(x, pre, layout="nc"):
    return torch.einsum("mi,mic->mc", pre, streams(x, layout))


def expand_combine(f, post, x, P, bias=None, layout="nc"):
    fb = f if bias is None else f + bias
    out = post[:, :, None] * fb[:, None, :] + torch.einsum("mij,mic->mjc", P, streams(x, layout))
    return from_streams(out, layout)
