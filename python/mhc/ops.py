"""The mhc ops as Python functions: any leading dims, defaults, checks.

Shapes follow MATH.md: x is [..., n, C] (layout "nc") or [..., C, n] ("cn");
the leading dims (sequence, batch, ...) are the tokens M. n is read from x.
Defaults are DeepSeek's (norm_eps = pre_eps = 1e-6, post_mult = 2,
softmax_eps Sinkhorn with 20 iterations); mhc.te has Transformer Engine's.
"""

import math
import numbers
import operator

import torch
from torch._C import _has_torch_function
from torch.compiler import is_compiling

from . import _C

_LAYOUTS = ("nc", "cn")


# N of n for every n in the ops' range, and n of N, asked of mhc._C once: the
# lookups below also run while torch.compile traces, which cannot call into C++.
_NUM_LOGITS = [0] + [_C.num_logits(n) for n in range(1, _C.MAX_STREAMS + 1)]
_STREAMS_OF_LOGITS = {N: n for n, N in enumerate(_NUM_LOGITS) if n}


def _num_logits(n):
    """N of n; 0 for an n outside the ops' range (the op then names it)."""
    return _NUM_LOGITS[n] if 1 <= n <= _C.MAX_STREAMS else 0


def _n_of(x, layout):
    """n of a streams tensor x [..., n, C] ("nc") or [..., C, n] ("cn")."""
    return x.shape[-2] if layout == "nc" else x.shape[-1]


def _streams(x, layout, name="x"):
    if layout not in _LAYOUTS:
        raise ValueError(f"layout must be 'nc' or 'cn', got {layout!r}")
    if not isinstance(x, torch.Tensor) or x.dim() < 3:
        want = "[..., n, C]" if layout == "nc" else "[..., C, n]"
        got = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(f"argument '{name}' must be a tensor {want} with at least one leading (token) dim; got {got}")
    n = _n_of(x, layout)
    C = x.shape[-1] if layout == "nc" else x.shape[-2]
    lead = tuple(x.shape[:-2])
    return lead, math.prod(lead), n, C


def _integer(name, v):
    """v as an int; a float (2.5, or 2.0) or bool is an error, not truncated."""
    if type(v) is int:  # the common case, without the ABC check below
        return v
    if isinstance(v, (bool, float)) or not isinstance(v, numbers.Integral):
        raise TypeError(f"argument '{name}' must be an integer; got {v!r}")
    return operator.index(v)


def _real(name, v):
    """v as a float (the op checks its range)."""
    if type(v) is float:  # the common case, without the ABC check below
        return v
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise TypeError(f"argument '{name}' must be a real number; got {v!r}")
    return float(v)


def _sinkhorn_args(iters, eps):
    return _integer("iters", iters), _real("eps", eps)


def _scale_args(norm_eps, pre_eps, post_mult):
    return _real("norm_eps", norm_eps), _real("pre_eps", pre_eps), _real("post_mult", post_mult)


def _flat(t, M, *rest):
    # Already [M, *rest] and contiguous (the common case): no torch calls,
    # which cost about a microsecond each from Python. The op checks shapes.
    if not isinstance(t, torch.Tensor):  # for the op to name
        return t
    if t.dim() == len(rest) + 1 and t.is_contiguous():
        return t
    return t.reshape(M, *rest).contiguous()


def _unflat(t, lead, *rest):
    return t if len(lead) == 1 else t.reshape(*lead, *rest)


def _dense(t):
    """t contiguous; anything else (None, a wrong type) as it is, for the op to name."""
    return t.contiguous() if isinstance(t, torch.Tensor) else t


_TORCH_OPS = object()  # _eager's answer: take the torch.ops.mhc.* path


def _eager(entry, tensors, *args):
    """entry(*args), one of mhc._C's eager entry points (the same dispatcher
    ops as torch.ops.mhc.*, a few microseconds less host time), or
    _TORCH_OPS where only torch.ops will do: while torch.compile traces, for
    arguments with a __torch_function__ override (a tensor subclass or mode),
    and for a non-tensor argument (torch.ops' error message names it)."""
    if is_compiling() or _has_torch_function(tensors):
        return _TORCH_OPS
    try:
        return entry(*args)
    except TypeError as e:
        if "incompatible function arguments" not in str(e):
            raise
        return _TORCH_OPS


def _streams_from_logits(N):
    n = _STREAMS_OF_LOGITS.get(N)
    if n is None:
        raise ValueError(f"h has {N} logits per token, which is not 2n + n^2 for any n")
    return n


def project(x, phi, weight=None, *, layout="nc", tf32=False):
    """h = (xvec * weight) phi^T and ms = mean(xvec^2) per token (eq. 14-15)."""
    if isinstance(x, torch.Tensor) and x.dim() == 3 and layout in _LAYOUTS:  # as in pre()
        out = _eager(_C.project, (x, phi, weight), x, phi, weight, layout, bool(tf32))
        if out is not _TORCH_OPS:
            return out
    lead, M, n, C = _streams(x, layout)
    h, ms = torch.ops.mhc.project(_flat(x, M, *x.shape[-2:]), _dense(phi), _dense(weight), n, layout, bool(tf32))
    return _unflat(h, lead, h.shape[-1]), _unflat(ms, lead)


def scale(h, ms, alpha, beta, *, norm_eps=1e-6, pre_eps=1e-6, post_mult=2.0):
    """pre, post, logits from the mixing logits (eq. 16-18)."""
    if not isinstance(h, torch.Tensor) or h.dim() < 2:
        got = tuple(h.shape) if isinstance(h, torch.Tensor) else type(h).__name__
        raise ValueError(f"argument 'h' must be a tensor [..., N] with at least one leading (token) dim; got {got}")
    lead, N = tuple(h.shape[:-1]), h.shape[-1]
    n = _streams_from_logits(N)
    eps = _scale_args(norm_eps, pre_eps, post_mult)
    if h.dim() == 2:  # [M, N], the common case
        out = _eager(_C.scale, (h, ms, alpha, beta), h, ms, alpha, beta, n, *eps)
        if out is not _TORCH_OPS:
            return out
    M = math.prod(lead)
    pre, post, logits = torch.ops.mhc.scale(_flat(h, M, N), _flat(ms, M), _dense(alpha), _dense(beta), n, *eps)
    return _unflat(pre, lead, n), _unflat(post, lead, n), _unflat(logits, lead, n, n)


def sinkhorn(logits, *, mode="softmax_eps", iters=20, eps=1e-6):
    """The doubly stochastic P from logits [..., n, n] (eq. 19)."""
    iters, eps = _sinkhorn_args(iters, eps)
    if isinstance(logits, torch.Tensor) and logits.dim() == 3:  # [M, n, n], the common case
        out = _eager(_C.sinkhorn, (logits,), logits, mode, iters, eps)
        if out is not _TORCH_OPS:
            return out
    if not isinstance(logits, torch.Tensor) or logits.dim() < 3 or logits.shape[-2] != logits.shape[-1]:
        got = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
        raise ValueError(f"argument 'logits' must be a tensor [..., n, n] with at least one leading (token) dim; "
                         f"got {got}")
    n = logits.shape[-1]
    M = math.prod(logits.shape[:-2])
    P = torch.ops.mhc.sinkhorn(_flat(logits, M, n, n), n, mode, iters, eps)
    return P if logits.dim() == 3 else P.reshape(logits.shape)


def aggregate(x, pre, *, layout="nc"):
    """y = sum_i pre_i x_i, the block input (F_pre)."""
    if isinstance(x, torch.Tensor) and x.dim() == 3 and layout in _LAYOUTS:  # as in pre()
        out = _eager(_C.aggregate, (x, pre), x, pre, layout)
        if out is not _TORCH_OPS:
            return out
    lead, M, n, C = _streams(x, layout)
    y = torch.ops.mhc.aggregate(_flat(x, M, *x.shape[-2:]), _flat(pre, M, n), n, layout)
    return _unflat(y, lead, C)


def expand_combine(f, post, x, P, bias=None, *, layout="nc"):
    """x_next = P^T x + post (f + bias) (F_post and the residual)."""
    if isinstance(x, torch.Tensor) and x.dim() == 3 and layout in _LAYOUTS:  # as in pre()
        out = _eager(_C.expand_combine, (f, post, x, P, bias), f, post, x, P, bias, layout)
        if out is not _TORCH_OPS:
            return out
        return torch.ops.mhc.expand_combine(_dense(f), _dense(post), _dense(x), _dense(P), _dense(bias),
                                            _n_of(x, layout), layout)
    lead, M, n, C = _streams(x, layout)
    out = torch.ops.mhc.expand_combine(_flat(f, M, C), _flat(post, M, n), _flat(x, M, *x.shape[-2:]),
                                       _flat(P, M, n, n), _dense(bias), n, layout)
    return out if x.dim() == 3 else out.reshape(x.shape)


def pre(x, phi, alpha, beta, weight=None, *, layout="nc", tf32=False, norm_eps=1e-6, pre_eps=1e-6,
        post_mult=2.0, mode="softmax_eps", iters=20, eps=1e-6):
    """One layer's pre step: returns (y, post, P) for the block input y.

    project -> scale -> sinkhorn -> aggregate in one torch.ops.mhc.pre call
    (one Python-to-C++ crossing instead of four; each inner op keeps its own
    autograd), so a small layer is not bound by host time.
    """
    scale_args, (iters, eps) = _scale_args(norm_eps, pre_eps, post_mult), _sinkhorn_args(iters, eps)
    if isinstance(x, torch.Tensor) and x.dim() == 3 and layout in _LAYOUTS:
        # [M, n, C] / [M, C, n], the common case: no reshapes (at M = 128
        # the layer is bound by host time; the op checks the shapes).
        out = _eager(_C.pre, (x, phi, alpha, beta, weight), x, phi, alpha, beta, weight, layout, bool(tf32),
                     *scale_args, mode, iters, eps)
        if out is not _TORCH_OPS:
            return out
        return torch.ops.mhc.pre(_dense(x), _dense(phi), _dense(alpha), _dense(beta), _dense(weight),
                                 _n_of(x, layout), layout, bool(tf32), *scale_args, mode, iters,
                                 eps)
    lead, M, n, C = _streams(x, layout)
    y, post_w, P = torch.ops.mhc.pre(_flat(x, M, *x.shape[-2:]), _dense(phi), _dense(alpha), _dense(beta),
                                     _dense(weight), n, layout, bool(tf32), *scale_args, mode, iters, eps)
    return _unflat(y, lead, C), _unflat(post_w, lead, n), (P if len(lead) == 1 else P.reshape(*lead, n, n))


def post(f, post_w, x, P, bias=None, *, layout="nc"):
    """One layer's post step: the next residual streams from the block output f."""
    return expand_combine(f, post_w, x, P, bias, layout=layout)


def post_pre(f, post, x, P, phi, alpha, beta, weight=None, bias=None, *, layout="nc", tf32=False, norm_eps=1e-6,
             pre_eps=1e-6, post_mult=2.0, mode="softmax_eps", iters=20, eps=1e-6):
    """The seam between two layers: layer l's post step, then layer l+1's pre step.

    Returns (x_next, y, post_next, P_next): x_next = P^T x + post (f + bias)
    with layer l's f, post, P, bias, and (y, post_next, P_next) =
    pre(x_next) with layer l+1's phi, alpha, beta, weight and options, as
    post() then pre() give them, in one torch.ops.mhc.post_pre call: one
    autograd node, and on CUDA one kernel spec each way where codegen has it
    (docs/design/seam.md).
    """
    scale_args, (iters, eps) = _scale_args(norm_eps, pre_eps, post_mult), _sinkhorn_args(iters, eps)
    if isinstance(x, torch.Tensor) and x.dim() == 3 and layout in _LAYOUTS:  # as in pre()
        out = _eager(_C.post_pre, (f, post, x, P, phi, alpha, beta, weight, bias), f, post, x, P, bias, phi, alpha,
                     beta, weight, layout, bool(tf32), *scale_args, mode, iters, eps)
        if out is not _TORCH_OPS:
            return out
        return torch.ops.mhc.post_pre(_dense(f), _dense(post), _dense(x), _dense(P), _dense(bias), _dense(phi),
                                      _dense(alpha), _dense(beta), _dense(weight), _n_of(x, layout), layout,
                                      bool(tf32), *scale_args, mode, iters, eps)
    lead, M, n, C = _streams(x, layout)
    x_next, y, post_next, P_next = torch.ops.mhc.post_pre(
        _flat(f, M, C), _flat(post, M, n), _flat(x, M, *x.shape[-2:]), _flat(P, M, n, n), _dense(bias), _dense(phi),
        _dense(alpha), _dense(beta), _dense(weight), n, layout, bool(tf32), *scale_args, mode, iters, eps)
    if len(lead) == 1:
        return x_next, y, post_next, P_next
    return (x_next.reshape(x.shape), _unflat(y, lead, C), _unflat(post_next, lead, n),
            P_next.reshape(*lead, n, n))
