"""Fake (meta) kernels and autograd formulas of torch.ops.mhc.*.

The fake kernels let torch.compile(fullgraph=True) trace through the ops;
the autograd formulas call the backward ops, which run the generated backward
kernels on CUDA (the reference elsewhere).
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


# --- autograd ----------------------------------------------------------------

def _grad(g, like):
    """An upstream gradient as the backward ops take it: dense, contiguous."""
    if g is None:
        return torch.zeros_like(like)
    return g.contiguous()


def _project_setup(ctx, inputs, output):
    x, phi, weight, n, layout, tf32 = inputs
    ctx.save_for_backward(x, phi, weight)
    ctx.args = (n, layout, tf32)


def _project_backward(ctx, gh, gms):
    x, phi, weight = ctx.saved_tensors
    n, layout, tf32 = ctx.args
    M = x.shape[0]
    gh = _grad(gh, x.new_empty((M, _N(n)), dtype=torch.float32))
    gms = _grad(gms, x.new_empty((M,), dtype=torch.float32))
    gx, gphi, gw = torch.ops.mhc.project_backward(gh, gms, x, phi, weight, n, layout, tf32)
    return gx, gphi, (gw if weight is not None else None), None, None, None


torch.library.register_autograd(lib + "project", _project_backward, setup_context=_project_setup)


def _scale_setup(ctx, inputs, output):
    h, ms, alpha, beta, n, norm_eps, pre_eps, post_mult = inputs
    ctx.save_for_backward(h, ms, alpha, beta)
    ctx.args = (n, norm_eps, pre_eps, post_mult)


def _scale_backward(ctx, gpre, gpost, glogits):
    h, ms, alpha, beta = ctx.saved_tensors
    n = ctx.args[0]
    M = h.shape[0]
    gpre = _grad(gpre, h.new_empty((M, n)))
    gpost = _grad(gpost, h.new_empty((M, n)))
    glogits = _grad(glogits, h.new_empty((M, n, n)))
    gh, gms, galpha, gbeta = torch.ops.mhc.scale_backward(gpre, gpost, glogits, h, ms, alpha, beta, *ctx.args)
    return gh, gms, galpha, gbeta, None, None, None, None


torch.library.register_autograd(lib + "scale", _scale_backward, setup_context=_scale_setup)


def _sinkhorn_setup(ctx, inputs, output):
    logits, n, mode, iters, eps = inputs
    ctx.save_for_backward(logits)
    ctx.args = (n, mode, iters, eps)


def _sinkhorn_backward(ctx, gP):
    (logits,) = ctx.saved_tensors
    g = torch.ops.mhc.sinkhorn_backward(_grad(gP, logits), logits, *ctx.args)
    return g, None, None, None, None


torch.library.register_autograd(lib + "sinkhorn", _sinkhorn_backward, setup_context=_sinkhorn_setup)


def _aggregate_setup(ctx, inputs, output):
    x, pre, n, layout = inputs
    ctx.save_for_backward(x, pre)
    ctx.args = (n, layout)


def _aggregate_backward(ctx, gy):
    x, pre = ctx.saved_tensors
    n, layout = ctx.args
    C = x.shape[2] if layout == "nc" else x.shape[1]
    gx, gpre = torch.ops.mhc.aggregate_backward(_grad(gy, x.new_empty((x.shape[0], C))), x, pre, n, layout)
    return gx, gpre, None, None


torch.library.register_autograd(lib + "aggregate", _aggregate_backward, setup_context=_aggregate_setup)


def _combine_setup(ctx, inputs, output):
    f, post, x, P, bias, n, layout = inputs
    ctx.save_for_backward(f, post, x, P, bias)
    ctx.args = (n, layout)


def _combine_backward(ctx, gout):
    f, post, x, P, bias = ctx.saved_tensors
    gf, gpost, gx, gP, gbias = torch.ops.mhc.expand_combine_backward(
        _grad(gout, x), f, post, x, P, bias, *ctx.args)
    return gf, gpost, gx, gP, (gbias if bias is not None else None), None, None


torch.library.register_autograd(lib + "expand_combine", _combine_backward, setup_context=_combine_setup)
