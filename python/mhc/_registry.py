"""Fake (meta) kernels of torch.ops.mhc.*.

They let torch.compile(fullgraph=True) trace through the ops, and run the ops
on meta tensors. Each returns what the real op returns: the outputs' shapes
from the inputs', mixing outputs (h, ms, pre, post, logits, P) in the dtype
the ops' own rule gives (mhc._C.mixing_dtype, the C++ function the real ops
use), a gradient in its input's dtype, everything on the inputs' device; and,
as the real op does, tensors on different devices raise.
"""

import torch

from . import _C

lib = "mhc::"


def _N(n, op):
    """N = 2n + n^2 (mhc._C.num_logits) for an n in the ops' range (the real op's message)."""
    if not 1 <= n <= _C.MAX_STREAMS:
        raise ValueError(f"mhc.{op}: n must be >= 1 and <= {_C.MAX_STREAMS}; got {n}")
    return _C.num_logits(n)


def _mixing(t):
    """The mixing outputs' dtype for an op whose activation (or mixing) input is t."""
    return _C.mixing_dtype(t.dtype)


def _channels(x, layout):
    return x.shape[2] if layout == "nc" else x.shape[1]


_ARG_NAMES = {}


def _one_device(op, **tensors):
    """Every tensor (None: absent) on the first one's device, in the order the
    real op checks them (mhc._C.arg_names, runtime/torch/Checks.cpp): the
    dispatcher sends a call that mixes meta and CPU tensors here, not to the
    CPU kernel."""
    names = _ARG_NAMES.get(op) or _ARG_NAMES.setdefault(op, tuple(_C.arg_names(op)))
    assert set(names) == set(tensors), (op, names, tuple(tensors))
    first = None
    for name in names:
        t = tensors[name]
        if t is None:
            continue
        if first is None:
            first = t
        elif t.device != first.device:
            raise ValueError(f"mhc.{op}: argument '{name}' is on {t.device} but the other tensors are on "
                             f"{first.device}")


# --- forward ----------------------------------------------------------------

@torch.library.register_fake(lib + "project")
def _(x, phi, weight, n, layout, tf32):
    _one_device("project", x=x, phi=phi, weight=weight)
    M, f = x.shape[0], _mixing(x)
    return x.new_empty((M, _N(n, "project")), dtype=f), x.new_empty((M,), dtype=f)


@torch.library.register_fake(lib + "scale")
def _(h, ms, alpha, beta, n, norm_eps, pre_eps, post_mult):
    _one_device("scale", h=h, ms=ms, alpha=alpha, beta=beta)
    M, f = h.shape[0], _mixing(h)
    _N(n, "scale")
    return h.new_empty((M, n), dtype=f), h.new_empty((M, n), dtype=f), h.new_empty((M, n, n), dtype=f)


@torch.library.register_fake(lib + "sinkhorn")
def _(logits, n, mode, iters, eps):
    return logits.new_empty(logits.shape, dtype=_mixing(logits))


@torch.library.register_fake(lib + "aggregate")
def _(x, pre, n, layout):
    _one_device("aggregate", x=x, pre=pre)
    return x.new_empty((x.shape[0], _channels(x, layout)))


@torch.library.register_fake(lib + "expand_combine")
def _(f, post, x, P, bias, n, layout):
    _one_device("expand_combine", x=x, f=f, post=post, P=P, bias=bias)
    return x.new_empty(x.shape)


def _pre_outputs(x, phi, alpha, beta, weight, n, layout, saved):
    _one_device("pre", x=x, phi=phi, alpha=alpha, beta=beta, weight=weight)
    M, f, N = x.shape[0], _mixing(x), _N(n, "pre")
    y, post, P = x.new_empty((M, _channels(x, layout))), x.new_empty((M, n), dtype=f), x.new_empty((M, n, n), dtype=f)
    if not saved:
        return y, post, P
    h, ms = x.new_empty((M, N), dtype=f), x.new_empty((M,), dtype=f)
    return y, post, P, h, ms, x.new_empty((M, n), dtype=f), x.new_empty((M, n, n), dtype=f)


@torch.library.register_fake(lib + "pre")
def _(x, phi, alpha, beta, weight, n, layout, tf32, norm_eps, pre_eps, post_mult, mode, iters, eps):
    return _pre_outputs(x, phi, alpha, beta, weight, n, layout, saved=False)


@torch.library.register_fake(lib + "pre_saved")
def _(x, phi, alpha, beta, weight, n, layout, tf32, norm_eps, pre_eps, post_mult, mode, iters, eps):
    return _pre_outputs(x, phi, alpha, beta, weight, n, layout, saved=True)


# The layer seam (docs/design/seam.md): x_next, then the pre step's outputs of x_next.
def _post_pre_outputs(f, post, x, P, bias, phi, alpha, beta, weight, n, layout):
    _one_device("post_pre", f=f, post=post, x=x, P=P, bias=bias, phi=phi, alpha=alpha, beta=beta, weight=weight)
    y, post_next, P_next, h, ms, pre, logits = _pre_outputs(x, phi, alpha, beta, weight, n, layout, saved=True)
    return x.new_empty(x.shape), h, ms, pre, post_next, logits, P_next, y


@torch.library.register_fake(lib + "post_pre")
def _(f, post, x, P, bias, phi, alpha, beta, weight, n, layout, tf32, norm_eps, pre_eps, post_mult, mode, iters,
      eps):
    x_next, h, ms, pre, post_next, logits, P_next, y = _post_pre_outputs(f, post, x, P, bias, phi, alpha, beta,
                                                                         weight, n, layout)
    return x_next, y, post_next, P_next


@torch.library.register_fake(lib + "post_pre_saved")
def _(f, post, x, P, bias, phi, alpha, beta, weight, n, layout, tf32, norm_eps, pre_eps, post_mult, mode, iters,
      eps):
    return _post_pre_outputs(f, post, x, P, bias, phi, alpha, beta, weight, n, layout)


# The inference ops (out=; python/mhc/inference.py): they return nothing and write their out= tensors, which
# must have the shapes, dtypes and device the real op checks (runtime/torch/Checks.cpp, checkOut). Their
# Sinkhorn mode is named sinkhorn_mode (runtime/torch/OpHandles.h says why).

def _check_out(op, name, t, shape, dtype, like, earlier=()):
    """The real op's check of one out= tensor (its message), without the memory-overlap test on fake tensors."""
    shape = tuple(int(d) for d in shape)
    if (not isinstance(t, torch.Tensor) or t.dtype != dtype or tuple(t.shape) != shape or t.device != like.device
            or not t.is_contiguous()):
        got = type(t).__name__ if not isinstance(t, torch.Tensor) else (
            f"a {t.dtype} tensor of shape {list(t.shape)} on {t.device}"
            + ("" if t.is_contiguous() else " (not contiguous)"))
        raise ValueError(f"mhc.{op}: out argument '{name}' must be a contiguous {dtype} tensor of shape "
                         f"{list(shape)} on {like.device}; got {got}")
    for other_name, other in earlier:
        if other is t:
            raise ValueError(f"mhc.{op}: out argument '{name}' shares memory with out argument '{other_name}'; "
                             "it must be a tensor of its own")


def _check_pre_outs(op, x, n, layout, y, post, P, earlier=()):
    M, f = x.shape[0], _mixing(x)
    _check_out(op, "y", y, (M, _channels(x, layout)), x.dtype, x, earlier)
    earlier = (*earlier, ("y", y))
    _check_out(op, "post" if op == "pre_out" else "post_next", post, (M, n), f, x, earlier)
    earlier = (*earlier, ("post", post))
    _check_out(op, "P" if op == "pre_out" else "P_next", P, (M, n, n), f, x, earlier)


@torch.library.register_fake(lib + "post_pre_out")
def _(f, post, x, P, bias, phi, alpha, beta, weight, n, layout, tf32, norm_eps, pre_eps, post_mult, sinkhorn_mode,
      iters, eps, *, x_next, y, post_next, P_next):
    _post_pre_outputs(f, post, x, P, bias, phi, alpha, beta, weight, n, layout)
    _check_out("post_pre_out", "x_next", x_next, x.shape, x.dtype, x)
    _check_pre_outs("post_pre_out", x, n, layout, y, post_next, P_next, (("x_next", x_next),))


@torch.library.register_fake(lib + "pre_out")
def _(x, phi, alpha, beta, weight, n, layout, tf32, norm_eps, pre_eps, post_mult, sinkhorn_mode, iters, eps, *, y,
      post, P):
    _pre_outputs(x, phi, alpha, beta, weight, n, layout, saved=False)
    _check_pre_outs("pre_out", x, n, layout, y, post, P)


@torch.library.register_fake(lib + "expand_combine_out")
def _(f, post, x, P, bias, n, layout, *, out):
    _one_device("expand_combine", x=x, f=f, post=post, P=P, bias=bias)
    _check_out("expand_combine_out", "out", out, x.shape, x.dtype, x)


# --- backward: each gradient like its input; an absent input's is empty -----
# (gx with acc, x's gradient from its other users, is still x-shaped.)

def _like(t):
    return t.new_empty(t.shape)


@torch.library.register_fake(lib + "project_backward")
def _(gh, gms, x, phi, weight, n, layout, tf32, acc=None):
    _one_device("project_backward", x=x, phi=phi, weight=weight, gh=gh, gms=gms, acc=acc)
    gw = _like(weight) if weight is not None else phi.new_empty((0,))
    return _like(x), _like(phi), gw


@torch.library.register_fake(lib + "scale_backward")
def _(gpre, gpost, glogits, h, ms, alpha, beta, n, norm_eps, pre_eps, post_mult):
    _one_device("scale_backward", h=h, ms=ms, alpha=alpha, beta=beta, gpre=gpre, gpost=gpost, glogits=glogits)
    return _like(h), _like(ms), _like(alpha), _like(beta)


@torch.library.register_fake(lib + "sinkhorn_backward")
def _(gP, logits, n, mode, iters, eps):
    _one_device("sinkhorn_backward", gP=gP, logits=logits)
    return _like(logits)


@torch.library.register_fake(lib + "aggregate_backward")
def _(gy, x, pre, n, layout, acc=None):
    _one_device("aggregate_backward", x=x, pre=pre, gy=gy, acc=acc)
    return _like(x), _like(pre)


@torch.library.register_fake(lib + "expand_combine_backward")
def _(gout, f, post, x, P, bias, n, layout, acc=None):
    _one_device("expand_combine_backward", x=x, f=f, post=post, P=P, bias=bias, gout=gout, acc=acc)
    gb = _like(bias) if bias is not None else x.new_empty((0,))
    return _like(f), _like(post), _like(x), _like(P), gb


# TE's f32 x-gradient buffer (fused_grad_x_acc_buffer): the backward writes x's gradient into `buffer` (a
# contiguous float32 tensor of x's shape, runtime/torch/Checks.cpp checkBuffer) and returns the others.

def _check_buffer(op, buffer, x):
    if isinstance(buffer, torch.Tensor) and buffer.device != x.device:
        raise ValueError(f"mhc.{op}: argument 'buffer' is on {buffer.device} but the other tensors are on {x.device}")
    if (not isinstance(buffer, torch.Tensor) or buffer.dtype != torch.float32 or buffer.shape != x.shape
            or buffer.device != x.device or not buffer.is_contiguous()):
        got = type(buffer).__name__ if not isinstance(buffer, torch.Tensor) else (
            f"a {buffer.dtype} tensor of shape {list(buffer.shape)} on {buffer.device}"
            + ("" if buffer.is_contiguous() else " (not contiguous)"))
        raise ValueError(f"mhc.{op}: 'buffer' (the f32 x-gradient buffer) must be a contiguous torch.float32 "
                         f"tensor of shape {list(x.shape)} on {x.device}; got {got}")


@torch.library.register_fake(lib + "aggregate_backward_into")
def _(gy, x, pre, n, layout, *, buffer):
    _one_device("aggregate_backward_into", x=x, pre=pre, gy=gy, acc=None)
    _check_buffer("aggregate_backward_into", buffer, x)
    return _like(pre)


@torch.library.register_fake(lib + "expand_combine_backward_into")
def _(gout, f, post, x, P, bias, n, layout, *, buffer):
    _one_device("expand_combine_backward_into", x=x, f=f, post=post, P=P, bias=bias, gout=gout, acc=None)
    _check_buffer("expand_combine_backward_into", buffer, x)
    gb = _like(bias) if bias is not None else x.new_empty((0,))
    return _like(f), _like(post), _like(P), gb


@torch.library.register_fake(lib + "pre_backward")
def _(gy, gpost, gP, x, h, ms, pre, logits, phi, alpha, beta, weight, acc, n, layout, tf32, norm_eps, pre_eps,
      post_mult, mode, iters, eps):
    _one_device("pre_backward", gy=gy, gpost=gpost, gP=gP, x=x, h=h, ms=ms, pre=pre, logits=logits, phi=phi,
                alpha=alpha, beta=beta, weight=weight, acc=acc)
    _N(n, "pre_backward")
    gw = _like(weight) if weight is not None else phi.new_empty((0,))
    return _like(x), _like(phi), _like(alpha), _like(beta), gw


@torch.library.register_fake(lib + "post_pre_backward")
def _(gx_next, gy, gpost_next, gP_next, f, post, x, P, bias, x_next, h, ms, pre, logits, phi, alpha, beta, weight, n,
      layout, tf32, norm_eps, pre_eps, post_mult, mode, iters, eps):
    _one_device("post_pre_backward", gx_next=gx_next, gy=gy, gpost_next=gpost_next, gP_next=gP_next, f=f, post=post,
                x=x, P=P, bias=bias, x_next=x_next, h=h, ms=ms, pre=pre, logits=logits, phi=phi, alpha=alpha,
                beta=beta, weight=weight)
    _N(n, "post_pre_backward")
    gb = _like(bias) if bias is not None else x.new_empty((0,))
    gw = _like(weight) if weight is not None else phi.new_empty((0,))
    return _like(x), _like(f), _like(post), _like(P), gb, _like(phi), _like(alpha), _like(beta), gw


# Autograd is registered in C++ (runtime/torch/Autograd.cpp, AutogradSeam.cpp), so calls never
# enter Python.
