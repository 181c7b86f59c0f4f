"""The forward ops into preallocated outputs, for inference engines and CUDA graphs.

    import mhc.inference as mi
    outs = mi.empty_post_pre(x, layout="nc")       # (x_next, y, post_next, P_next), once
    with torch.no_grad():
        mi.post_pre(f, post, x, P, phi, alpha, beta, out=outs)   # every step, same addresses

Each function writes its results into `out` (a tuple of tensors the caller
allocated once, e.g. with the empty_* helpers) and returns it; nothing else
is allocated but the kernels' workspaces (from PyTorch's caching allocator, on
the current stream), so a call can be captured in a CUDA graph and replayed
with its outputs at static addresses. The results are bitwise those of
mhc.post_pre, mhc.pre and mhc.post on the same inputs (the same kernels, or
the same separate ops where the fused kernel does not apply). Arguments and
conventions are those functions' (n 1..8 from x's shape, layout "nc" or "cn",
DeepSeek's defaults, Transformer Engine's by keyword: layout="cn",
norm_eps=FLT_EPSILON, pre_eps=0, mode="log"). x is [M, n, C] ("nc") or
[M, C, n] ("cn"): one token dim.

They record no gradient: call them under torch.no_grad() or
torch.inference_mode() (with grad mode on and an input requiring grad they
raise). An out= tensor of the wrong shape, dtype or device, not contiguous,
or sharing memory with an input or another output raises ValueError naming
it and what was expected. They are torch.ops.mhc.post_pre_out, pre_out and
expand_combine_out, with fake kernels, so torch.compile(fullgraph=True)
traces them.
"""

import torch

from . import _C
from .ops import _TORCH_OPS, _eager, _scale_args, _sinkhorn_args, _streams

__all__ = ["post_pre", "pre", "post", "empty_post_pre", "empty_pre", "empty_post"]

_OUT_NAMES = {
    "post_pre": ("x_next", "y", "post_next", "P_next"),
    "pre": ("y", "post", "P"),
}


def _outs(fn, out):
    """out as the tuple of tensors `fn` writes (its names in the message when it is not)."""
    names = _OUT_NAMES[fn]
    if isinstance(out, (tuple, list)) and len(out) == len(names):
        return tuple(out)
    got = f"a {type(out).__name__} of {len(out)}" if isinstance(out, (tuple, list)) else type(out).__name__
    raise TypeError(f"mhc.inference.{fn}: argument 'out' must be a tuple ({', '.join(names)}), e.g. from "
                    f"mhc.inference.empty_{fn}(x); got {got}")


def _options(norm_eps, pre_eps, post_mult, iters, eps):
    """(norm_eps, pre_eps, post_mult), iters, eps checked as mhc.ops does; the common types without a call
    per value (this runs on every call of an engine's step)."""
    if type(norm_eps) is float and type(pre_eps) is float and type(post_mult) is float and type(iters) is int \
            and type(eps) is float:
        return (norm_eps, pre_eps, post_mult), iters, eps
    return (_scale_args(norm_eps, pre_eps, post_mult), *_sinkhorn_args(iters, eps))


def _tokens(fn, x, layout):
    """(M, n, C) of a 3-D x; a clear error otherwise (the ops take one token dim here)."""
    lead, M, n, C = _streams(x, layout)
    if len(lead) != 1:
        want = "[M, n, C]" if layout == "nc" else "[M, C, n]"
        raise ValueError(f"mhc.inference.{fn}: argument 'x' must be {want} (one token dim; flatten the others); "
                         f"got shape {tuple(x.shape)}")
    return M, n, C


def empty_pre(x, *, layout="nc"):
    """(y, post, P) for pre(x, ...) to write: y [M, C] in x's dtype, post [M, n] and P [M, n, n] in the
    mixing dtype (float32; float64 for float64 x), on x's device."""
    M, n, C = _tokens("empty_pre", x, layout)
    mixing = _C.mixing_dtype(x.dtype)
    return (x.new_empty((M, C)), x.new_empty((M, n), dtype=mixing), x.new_empty((M, n, n), dtype=mixing))


def empty_post_pre(x, *, layout="nc"):
    """(x_next, y, post_next, P_next) for post_pre(..., x, ...) to write: x_next like x, then empty_pre's."""
    _tokens("empty_post_pre", x, layout)
    return (torch.empty_like(x, memory_format=torch.contiguous_format), *empty_pre(x, layout=layout))


def empty_post(x):
    """x_next for post(..., x, ...) to write: like x, contiguous."""
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def post_pre(f, post, x, P, phi, alpha, beta, weight=None, bias=None, *, out, layout="nc", tf32=False,
             norm_eps=1e-6, pre_eps=1e-6, post_mult=2.0, mode="softmax_eps", iters=20, eps=1e-6):
    """The seam between two layers into out = (x_next, y, post_next, P_next); returns out.

    mhc.post_pre's arguments and results: x_next = P^T x + post (f + bias) with layer l's f, post, x, P,
    bias, and (y, post_next, P_next) = pre(x_next) with layer l+1's phi, alpha, beta, weight and options.
    """
    if type(out) is not tuple or len(out) != 4:
        out = _outs("post_pre", out)
    x_next, y, post_next, P_next = out
    scale_args, iters, eps = _options(norm_eps, pre_eps, post_mult, iters, eps)
    if isinstance(x, torch.Tensor) and x.dim() == 3 and layout in ("nc", "cn"):
        done = _eager(_C.post_pre_out, (f, post, x, P, phi, alpha, beta, weight, bias, x_next, y, post_next, P_next),
                      f, post, x, P, bias, phi, alpha, beta, weight, layout, bool(tf32), *scale_args, mode, iters, eps,
                      x_next, y, post_next, P_next)
        if done is not _TORCH_OPS:
            return out
    M, n, C = _tokens("post_pre", x, layout)
    torch.ops.mhc.post_pre_out(f, post, x, P, bias, phi, alpha, beta, weight, n, layout, bool(tf32), *scale_args,
                               mode, iters, eps, x_next=x_next, y=y, post_next=post_next, P_next=P_next)
    return out


def pre(x, phi, alpha, beta, weight=None, *, out, layout="nc", tf32=False, norm_eps=1e-6, pre_eps=1e-6,
        post_mult=2.0, mode="softmax_eps", iters=20, eps=1e-6):
    """The first layer's pre step into out = (y, post, P); returns out (mhc.pre's arguments and results)."""
    if type(out) is not tuple or len(out) != 3:
        out = _outs("pre", out)
    y, post_w, P = out
    scale_args, iters, eps = _options(norm_eps, pre_eps, post_mult, iters, eps)
    if isinstance(x, torch.Tensor) and x.dim() == 3 and layout in ("nc", "cn"):
        done = _eager(_C.pre_out, (x, phi, alpha, beta, weight, y, post_w, P), x, phi, alpha, beta, weight, layout,
                      bool(tf32), *scale_args, mode, iters, eps, y, post_w, P)
        if done is not _TORCH_OPS:
            return out
    M, n, C = _tokens("pre", x, layout)
    torch.ops.mhc.pre_out(x, phi, alpha, beta, weight, n, layout, bool(tf32), *scale_args, mode, iters, eps, y=y,
                          post=post_w, P=P)
    return out


def post(f, post_w, x, P, bias=None, *, out, layout="nc"):
    """The last layer's post step into out (x_next, like x); returns out (mhc.post's arguments and result)."""
    if isinstance(x, torch.Tensor) and x.dim() == 3 and layout in ("nc", "cn"):
        done = _eager(_C.expand_combine_out, (f, post_w, x, P, bias, out), f, post_w, x, P, bias, layout, out)
        if done is not _TORCH_OPS:
            return out
    M, n, C = _tokens("post", x, layout)
    torch.ops.mhc.expand_combine_out(f, post_w, x, P, bias, n, layout, out=out)
    return out
