"""Fake (meta) kernels of torch.ops.mhc.*.

The fake kernels let torch.compile(fullgraph=True) trace through the ops.
"""

import torch

lib = "mhc::"


def _N(n):
    return 2 * n + n * n


# --- fake kernels -----------------------------------------------------------

@torch.library.register_fake(lib + "project")
def _(x, phi, weight, n, layout, tf32):
    M = x.shape[0]
    return x.new_empty((M, _N(n)), dtype=torch.float32), x.new_empty((M,), dtype=torch.float32)


@torch.library.register_fake(lib + "project_backward")
def _(gh, gms, x, phi, weight, n, layout, tf32):
    gw = torch.empty_like(weight) if weight is not None else phi.new_empty((0,))
    return torch.empty_like(x), torch.empty_like(phi), gw


@torch.library.register_fake(lib + "scale")
def _(h, ms, alpha, beta, n, norm_eps, pre_eps, post_mult):
    M = h.shape[0]
    return h.new_empty((M, n)), h.new_empty((M, n)), h.new_empty((M, n, n))


@torch.library.register_fake(lib + "scale_backward")
def _(gpre, gpost, glogits, h, ms, alpha, beta, n, norm_eps, pre_eps, post_mult):
    return torch.empty_like(h), torch.empty_like(ms), torch.empty_like(alpha), torch.empty_like(beta)


@torch.library.register_fake(lib + "sinkhorn")
def _(logits, n, mode, iters, eps):
    return torch.empty_like(logits)


@torch.library.register_fake(lib + "sinkhorn_backward")
def _(gP, logits, n, mode, iters, eps):
    return torch.empty_like(logits)


@torch.library.register_fake(lib + "aggregate")
def _(x, pre, n, layout):
    C = x.shape[2] if layout == "nc" else x.shape[1]
    return x.new_empty((x.shape[0], C))


@torch.library.register_fake(lib + "aggregate_backward")
def _(gy, x, pre, n, layout):
    return torch.empty_like(x), torch.empty_like(pre)


@torch.library.register_fake(lib + "expand_combine")
def _(f, post, x, P, bias, n, layout):
    return torch.empty_like(x)


@torch.library.register_fake(lib + "expand_combine_backward")
def _(gout, f, post, x, P, bias, n, layout):
    gb = torch.empty_like(bias) if bias is not None else x.new_empty((0,))
    return torch.empty_like(f), torch.empty_like(post), torch.empty_like(x), torch.empty_like(P), gb

@torch.library.register_fake(lib + "pre")
def _(x, phi, alpha, beta, weight, n, layout, tf32, norm_eps, pre_eps, post_mult, mode, iters, eps):
    M, C = x.shape[0], (x.shape[2] if layout == "nc" else x.shape[1])
    return x.new_empty((M, C)), x.new_empty((M, n), dtype=torch.float32), x.new_empty((M, n, n), dtype=torch.float32)


@torch.library.register_fake(lib + "pre_saved")
def _(x, phi, alpha, beta, weight, n, layout, tf32, norm_eps, pre_eps, post_mult, mode, iters, eps):
    M, C = x.shape[0], (x.shape[2] if layout == "nc" else x.shape[1])
    f32 = dict(dtype=torch.float32)
    return (x.new_empty((M, C)), x.new_empty((M, n), **f32), x.new_empty((M, n, n), **f32),
            x.new_empty((M, _N(n)), **f32), x.new_empty((M,), **f32), x.new_empty((M, n), **f32),
            x.new_empty((M, n, n), **f32))


# Autograd is registered in C++ (runtime/torch/Autograd.cpp), so calls never
# enter Python.
