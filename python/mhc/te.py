"""Transformer Engine's mHC API (transformer_engine.pytorch.triton.mhc) on mhc's ops.

A user of TE's module switches by changing the import: TE's function names,
argument order, defaults, conventions (x (s, b, C, n), layout "cn";
norm_eps = FLT_EPSILON, no pre eps, post x 2, log Sinkhorn, 20 iterations),
dtypes and shapes. docs/PYTORCH.md ("Transformer Engine's API") is the
contract: what is TE's, the casts at the boundary and mhc's extensions.
fused_grad_x_acc_buffer is TE's f32 x-gradient buffer (docs/MATH.md,
"acc=f32"): expand_combine's backward stores x's gradient in it, aggregate's
adds to it in place (both return no gradient for x), the projection's returns
the buffer plus its own, summed in f32 and cast to x's dtype. In
mhc_generate_mix_and_aggregate (the pre step in one call) aggregate's part is
added where the projection's backward reads the buffer, not stored in it:
after the backward the buffer holds what expand_combine stored (TE's holds the
full sum; nothing of TE's reads it after x's gradient is returned).
"""

import os

import torch

from . import _C, ops

_FLT_EPSILON = torch.finfo(torch.float32).eps
_H_COLUMNS = 32  # TE's padded width of H

# TE's determinism switch: "0" asks for deterministic algorithms. Read once,
# at import, as TE does; mhc is deterministic either way.
ENFORCE_DETERMINISTIC = os.environ.get("NVTE_ALLOW_NONDETERMINISTIC_ALGO") == "0"


def check_deterministic(operator, use_split_k=False):
    """TE's guard against split-K atomics under ENFORCE_DETERMINISTIC. mhc's
    split reductions are fixed-order, so no setting conflicts: never raises."""
    del operator, use_split_k


def _acc_buffer(fn, buffer, x):
    """TE's checks of fused_grad_x_acc_buffer (float32, x.numel() values, x's
    device); None, or the buffer viewed as x's shape (a view: the ops write
    the caller's buffer)."""
    if buffer is None:
        return None
    if not isinstance(buffer, torch.Tensor) or buffer.dtype != torch.float32:
        got = buffer.dtype if isinstance(buffer, torch.Tensor) else type(buffer).__name__
        raise ValueError(f"mhc.te.{fn}: argument 'fused_grad_x_acc_buffer' must be a float32 tensor; got {got}")
    if buffer.numel() != x.numel() or buffer.device != x.device or not buffer.is_contiguous():
        raise ValueError(f"mhc.te.{fn}: argument 'fused_grad_x_acc_buffer' must be a contiguous tensor of "
                         f"x.numel() = {x.numel()} values on {x.device}; got shape {tuple(buffer.shape)} on "
                         f"{buffer.device}" + ("" if buffer.is_contiguous() else " (not contiguous)"))
    return buffer.view(x.shape)


class _ProjectionIntoBuffer(torch.autograd.Function):
    """(h, ms) of x3 (M, C, n); the backward returns buffer + its own gx in
    x's dtype (project_backward with the buffer as an f32 acc)."""

    @staticmethod
    def forward(ctx, x3, phi, weight, tf32, buffer3):
        ctx.save_for_backward(x3, phi, weight)
        ctx.tf32, ctx.buffer3 = tf32, buffer3
        return ops.project(x3, phi, weight, layout="cn", tf32=tf32)

    @staticmethod
    def backward(ctx, gh, gms):
        x3, phi, weight = ctx.saved_tensors
        acc = ctx.buffer3 if x3.dtype != torch.float64 else ctx.buffer3.to(x3.dtype)
        gx, gphi, gw = torch.ops.mhc.project_backward(gh.contiguous(), gms.contiguous(), x3, phi, weight,
                                                      x3.shape[-1], "cn", ctx.tf32, acc)
        return gx, gphi, (gw if weight is not None else None), None, None


class _AggregateIntoBuffer(torch.autograd.Function):
    """y of x3 (M, C, n); the backward adds x's gradient to the buffer in f32
    (aggregate_backward_into) and returns none for x."""

    @staticmethod
    def forward(ctx, x3, pre, buffer3):
        ctx.save_for_backward(x3, pre)
        ctx.buffer3 = buffer3
        return ops.aggregate(x3, pre, layout="cn")

    @staticmethod
    def backward(ctx, gy):
        x3, pre = ctx.saved_tensors
        gpre = torch.ops.mhc.aggregate_backward_into(gy.contiguous(), x3, pre, x3.shape[-1], "cn",
                                                     buffer=ctx.buffer3)
        return None, gpre, None


class _ExpandCombineIntoBuffer(torch.autograd.Function):
    """out of x3 (M, C, n); the backward stores x's gradient in the buffer in
    f32 (expand_combine_backward_into) and returns none for x."""

    @staticmethod
    def forward(ctx, f, post, x3, P, bias, buffer3):
        ctx.save_for_backward(f, post, x3, P, bias)
        ctx.buffer3 = buffer3
        return ops.expand_combine(f, post, x3, P, bias, layout="cn")

    @staticmethod
    def backward(ctx, gout):
        f, post, x3, P, bias = ctx.saved_tensors
        gf, gpost, gP, gbias = torch.ops.mhc.expand_combine_backward_into(
            gout.contiguous(), f, post, x3, P, bias, x3.shape[-1], "cn", buffer=ctx.buffer3)
        return gf, gpost, None, gP, (gbias if bias is not None else None), None


def _n(fn, n):
    n = ops._integer("n", n)
    if not 1 <= n <= _C.MAX_STREAMS:
        raise ValueError(f"mhc.te.{fn}: argument 'n' must be >= 1 and <= {_C.MAX_STREAMS}; got {n}")
    return n


def _tensor(fn, name, t, min_dim, want):
    if not isinstance(t, torch.Tensor) or t.dim() < min_dim:
        got = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
        raise ValueError(f"mhc.te.{fn}: argument '{name}' must be a tensor {want}; got {got}")


def _streams_n(fn, x, n, name="x"):
    """x (..., C, n) with its last dim equal to the argument n."""
    _tensor(fn, name, x, 3, "(s, b, C, n)")
    n = _n(fn, n)
    if x.shape[-1] != n:
        raise ValueError(f"mhc.te.{fn}: argument 'n' is {n} but '{name}' has {x.shape[-1]} streams "
                         f"(its last dim; '{name}' is (s, b, C, n), got shape {tuple(x.shape)})")
    return n


def _shaped(fn, name, t, want, *alternatives, optional=False):
    """t, a tensor of shape `want` (or one of `alternatives`), or None where optional."""
    if (optional and t is None) or (isinstance(t, torch.Tensor) and tuple(t.shape) in (want, *alternatives)):
        return
    got = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
    raise ValueError(f"mhc.te.{fn}: argument '{name}' must have shape {want}; got {got}")


# The ops' mixing dtype of each floating dtype, asked of mhc._C once (the
# lookup also runs while torch.compile traces, which cannot call into C++).
_MIXING = {d: _C.mixing_dtype(d) for d in (torch.bfloat16, torch.float16, torch.float32, torch.float64)}


def _mixing(t):
    """A mixing tensor in the ops' mixing dtype (float32; float64 stays)."""
    if not isinstance(t, torch.Tensor):
        return t  # for the op to name
    want = _MIXING.get(t.dtype, t.dtype)  # (another dtype: the op names it)
    return t if t.dtype == want else t.to(want)


def _one_dtype(a, b):
    """a and b in one dtype, the wider of the two (bfloat16 -> float32 is
    exact), where the op needs them alike; float64 and non-tensors as given."""
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor) or a.dtype == b.dtype:
        return a, b
    if torch.float64 in (a.dtype, b.dtype) or not (a.is_floating_point() and b.is_floating_point()):
        return a, b  # float64 is all or nothing: the op names the argument
    wide = torch.promote_types(a.dtype, b.dtype)
    return a.to(wide), b.to(wide)


def _logits_n(fn, N, name):
    try:
        return ops._streams_from_logits(N)
    except ValueError:
        raise ValueError(f"mhc.te.{fn}: argument '{name}' has {N} rows, which is not 2n + n^2 for any n") from None


def _pad_h(h):
    """H as TE returns it: (M, 32) with zeros past N, for N <= 32."""
    N = h.shape[-1]
    return h if N >= _H_COLUMNS else torch.nn.functional.pad(h, (0, _H_COLUMNS - N))


def mhc_fused_projection(x, phi, use_tf32=True, norm_weight=None, fused_grad_x_acc_buffer=None,
                         use_split_k=False):
    """H (M, 32) float32 (its first N = 2n + n^2 columns valid, the rest zero;
    (M, N) for n >= 5) and ms (M,) float32, for x (M, n*C) in TE's (C, n)
    order and phi (N, n*C). norm_weight (n*C,) scales x's columns."""
    fn = "mhc_fused_projection"
    check_deterministic(fn, use_split_k)
    _tensor(fn, "x", x, 2, "(M, n*C)")
    _tensor(fn, "phi", phi, 2, "(2n + n^2, n*C)")
    if x.dim() != 2:
        raise ValueError(f"mhc.te.{fn}: argument 'x' must be (M, n*C); got {tuple(x.shape)}")
    n = _logits_n(fn, phi.shape[0], "phi")
    if x.shape[1] % n:
        raise ValueError(f"mhc.te.{fn}: argument 'x' has {x.shape[1]} columns, not a multiple of n = {n} "
                         f"(phi has {phi.shape[0]} = 2n + n^2 rows)")
    phi, norm_weight = _one_dtype(phi, norm_weight)
    x3 = x.reshape(x.shape[0], x.shape[1] // n, n)
    buffer = _acc_buffer(fn, fused_grad_x_acc_buffer, x3)
    if buffer is None:
        h, ms = ops.project(x3, phi, norm_weight, layout="cn", tf32=use_tf32)
    else:
        h, ms = _ProjectionIntoBuffer.apply(x3, ops._dense(phi), ops._dense(norm_weight), bool(use_tf32), buffer)
    return _pad_h(h), ms


def _scale_out(fn, H, alpha, beta, ms, n):
    """(pre, post, logits (..., n, n)) of TE's scale, in H's dtype."""
    _tensor(fn, "H", H, 2, "(M, 32)")
    n = _n(fn, n)
    N = ops._num_logits(n)
    if H.shape[-1] < N:
        raise ValueError(f"mhc.te.{fn}: argument 'H' has {H.shape[-1]} columns; n = {n} needs the "
                         f"2n + n^2 = {N} logits (H is (M, 32) or (M, {N})); got shape {tuple(H.shape)}")
    if isinstance(beta, torch.Tensor) and beta.numel() != N:
        raise ValueError(f"mhc.te.{fn}: argument 'beta' must have 2n + n^2 = {N} values for n = {n} "
                         f"((1, {N})); got shape {tuple(beta.shape)}")
    h = H if H.shape[-1] == N else H[..., :N]
    h = _mixing(h).contiguous()
    alpha, beta = _one_dtype(alpha, beta)
    beta = beta.reshape(-1) if isinstance(beta, torch.Tensor) else beta
    outs = ops.scale(h, _mixing(ms), alpha, beta, norm_eps=_FLT_EPSILON, pre_eps=0.0, post_mult=2.0)
    return tuple(o if o.dtype == H.dtype else o.to(H.dtype) for o in outs)


def mhc_fused_scale(H, alpha, beta, ms, n):
    """(H_pre (M, n), H_post (M, n), H_res (M, n*n)) in H's dtype from H
    (M, 32) (or (M, N)), alpha (3,), beta (1, N) and ms (M,)."""
    pre, post, logits = _scale_out("mhc_fused_scale", H, alpha, beta, ms, n)
    return pre, post, logits.flatten(-2)


def mhc_fused_sinkhorn(H_res, n=4, recompute_hist=True, iters=20):
    """The doubly stochastic H_res (s, b, n, n) in H_res's dtype, log-domain
    Sinkhorn with `iters` iterations. H_res (..., n*n) is accepted too, and
    keeps its shape. The backward always recomputes (recompute_hist)."""
    fn = "mhc_fused_sinkhorn"
    del recompute_hist
    _tensor(fn, "H_res", H_res, 2, "(s, b, n, n)")
    n = _n(fn, n)
    if H_res.dim() >= 3 and tuple(H_res.shape[-2:]) == (n, n):
        L = H_res
    elif H_res.shape[-1] == n * n:
        L = H_res.reshape(*H_res.shape[:-1], n, n)
    else:
        raise ValueError(f"mhc.te.{fn}: argument 'n' is {n} but 'H_res' is not (s, b, n, n) or (..., n*n) "
                         f"for it; got shape {tuple(H_res.shape)}")
    P = ops.sinkhorn(_mixing(L), mode="log", iters=iters)
    P = P if P.dtype == H_res.dtype else P.to(H_res.dtype)
    return P if L is H_res else P.reshape(H_res.shape)


def mhc_fused_aggregate(x, H_pre, n, use_tf32=True, fused_grad_x_acc_buffer=None):
    """out (s, b, C) in x's dtype: out[..., c] = sum_i x[..., c, i] H_pre[..., i]."""
    fn = "mhc_fused_aggregate"
    n = _streams_n(fn, x, n)
    _shaped(fn, "H_pre", H_pre, (*x.shape[:-2], n))
    buffer = _acc_buffer(fn, fused_grad_x_acc_buffer, x)
    if buffer is None:
        return ops.aggregate(x, _mixing(H_pre), layout="cn")
    lead, C = tuple(x.shape[:-2]), x.shape[-2]
    x3, M = x.reshape(-1, C, n), x.numel() // (C * n)
    y = _AggregateIntoBuffer.apply(x3, _mixing(H_pre).reshape(M, n), buffer.view(x3.shape))
    return y.reshape(*lead, C)


def mhc_fused_expand_combine(f, bias, H_post, x, H_res, n, use_tf32=True, fused_grad_x_acc_buffer=None):
    """out (s, b, C, n) in x's dtype: (f + bias) H_post + x H_res."""
    fn = "mhc_fused_expand_combine"
    n = _streams_n(fn, x, n)
    lead, C = tuple(x.shape[:-2]), x.shape[-2]
    _shaped(fn, "f", f, (*lead, C))
    _shaped(fn, "bias", bias, (C,), optional=True)
    _shaped(fn, "H_post", H_post, (*lead, n))
    _shaped(fn, "H_res", H_res, (*lead, n, n), (*lead, n * n))
    if H_res.dim() == len(lead) + 1:  # (..., n*n)
        H_res = H_res.reshape(*lead, n, n)
    if isinstance(f, torch.Tensor) and f.dtype != x.dtype and torch.float64 not in (f.dtype, x.dtype):
        f = f.to(x.dtype)
    buffer = _acc_buffer(fn, fused_grad_x_acc_buffer, x)
    if buffer is None:
        return ops.expand_combine(f, _mixing(H_post), x, _mixing(H_res), bias, layout="cn")
    M = x.numel() // (C * n)
    x3 = x.reshape(M, C, n)
    out = _ExpandCombineIntoBuffer.apply(f.reshape(M, C), _mixing(H_post).reshape(M, n), x3,
                                         _mixing(H_res).reshape(M, n, n), ops._dense(bias),
                                         buffer.view(x3.shape))
    return out.reshape(x.shape)


def mhc_generate_mix_and_aggregate(x, phi, alpha, beta, norm_weight=None, use_tf32=True,
                                   fused_grad_x_acc_buffer=None, use_split_k=False):
    """TE's composed pre step: (out (s, b, C) in x's dtype, H_post (s, b, n)
    float32, H_res (s, b, n, n) float32) for x (s, b, C, n)."""
    fn = "mhc_generate_mix_and_aggregate"
    check_deterministic(fn, use_split_k)
    _tensor(fn, "x", x, 3, "(s, b, C, n)")
    if fused_grad_x_acc_buffer is not None:
        return _mix_and_aggregate_into(fn, x, phi, alpha, beta, norm_weight, use_tf32, fused_grad_x_acc_buffer)
    phi, norm_weight = _one_dtype(phi, norm_weight)
    alpha, beta = _one_dtype(alpha, beta)
    beta = beta.reshape(-1) if isinstance(beta, torch.Tensor) else beta
    return ops.pre(x, phi, alpha, beta, norm_weight, layout="cn", tf32=use_tf32,
                   norm_eps=_FLT_EPSILON, pre_eps=0.0, post_mult=2.0, mode="log", iters=20)


class _PreIntoBuffer(torch.autograd.Function):
    """TE's composed pre step with the buffer: the fused pre step's forward
    (pre_saved: one kernel where it fuses); the backward is pre_backward with
    the buffer as its f32 acc, returning buffer + aggregate's + the
    projection's x gradient in x's dtype (on the flagship one pass: the
    projection backward forms aggregate's gradient in registers). The buffer
    is read, not written: aggregate's part is not left in it."""

    @staticmethod
    def forward(ctx, x3, phi, alpha, beta, weight, tf32, buffer3):
        attrs = (x3.shape[-1], "cn", tf32, _FLT_EPSILON, 0.0, 2.0, "log", 20, 1e-6)
        y, post, P, h, ms, pre, logits = torch.ops.mhc.pre_saved(x3, phi, alpha, beta, weight, *attrs)
        ctx.save_for_backward(x3, phi, alpha, beta, weight, h, ms, pre, logits)
        ctx.attrs, ctx.buffer3 = attrs, buffer3
        return y, post, P

    @staticmethod
    def backward(ctx, gy, gpost, gP):
        x3, phi, alpha, beta, weight, h, ms, pre, logits = ctx.saved_tensors
        n, layout, tf32, norm_eps, pre_eps, post_mult, mode, iters, eps = ctx.attrs
        acc = ctx.buffer3 if x3.dtype != torch.float64 else ctx.buffer3.to(x3.dtype)
        gx, gphi, galpha, gbeta, gw = torch.ops.mhc.pre_backward(
            gy.contiguous(), gpost.contiguous(), gP.contiguous(), x3, h, ms, pre, logits, phi, alpha, beta, weight,
            acc, n, layout, tf32, norm_eps, pre_eps, post_mult, mode, iters, eps)
        return gx, gphi, galpha, gbeta, (gw if weight is not None else None), None, None


def _mix_and_aggregate_into(fn, x, phi, alpha, beta, norm_weight, use_tf32, buffer):
    """mhc_generate_mix_and_aggregate with TE's buffer (_PreIntoBuffer); the
    arguments' dtypes as the path without it takes them."""
    buffer = _acc_buffer(fn, buffer, x)  # (TE's checks, named for fn)
    lead, C, n = tuple(x.shape[:-2]), x.shape[-2], x.shape[-1]
    M = x.numel() // max(C * n, 1)
    phi, norm_weight = _one_dtype(phi, norm_weight)
    alpha, beta = _one_dtype(alpha, beta)
    beta = beta.reshape(-1) if isinstance(beta, torch.Tensor) else beta
    x3 = x.reshape(M, C, n)
    y, post, P = _PreIntoBuffer.apply(x3, ops._dense(phi), ops._dense(alpha), ops._dense(beta),
                                      ops._dense(norm_weight), bool(use_tf32), buffer.view(x3.shape))
    return y.reshape(*lead, C), post.reshape(*lead, n), P.reshape(*lead, n, n)


# TE's autograd operators, by name: `.apply` with TE's positional arguments
# and TE's results (the functions above hold the work).

class mHCProjectionOp:  # noqa: N801 (TE's name)
    """(H, ms) = mHCProjectionOp.apply(x, phi, norm_weight, use_tf32, fused_grad_x_acc_buffer, use_split_k)."""

    @staticmethod
    def apply(x, phi, norm_weight=None, use_tf32=True, fused_grad_x_acc_buffer=None, use_split_k=False):
        return mhc_fused_projection(x, phi, use_tf32, norm_weight, fused_grad_x_acc_buffer, use_split_k)


class mHCScaleFusedOp:  # noqa: N801
    """out (M, 32) in H's dtype = [H_pre | H_post | H_res | zeros] = mHCScaleFusedOp.apply(H, alpha, beta, ms, n)."""

    @staticmethod
    def apply(H, alpha, beta, ms, n):
        pre, post, logits = _scale_out("mHCScaleFusedOp", H, alpha, beta, ms, n)
        return _pad_h(torch.cat([pre, post, logits.flatten(-2)], dim=-1))


class mHCSinkhornOp:  # noqa: N801
    """H_res = mHCSinkhornOp.apply(H_res, n, recompute_hist, iters)."""

    @staticmethod
    def apply(H_res, n=4, recompute_hist=True, iters=20):
        return mhc_fused_sinkhorn(H_res, n, recompute_hist, iters)


class mHCAggregateOp:  # noqa: N801
    """out = mHCAggregateOp.apply(x, H_pre, n, use_tf32, fused_grad_x_acc_buffer)."""

    @staticmethod
    def apply(x, H_pre, n, use_tf32=True, fused_grad_x_acc_buffer=None):
        return mhc_fused_aggregate(x, H_pre, n, use_tf32, fused_grad_x_acc_buffer)


class mHCExpandCombineOp:  # noqa: N801
    """out = mHCExpandCombineOp.apply(f, bias, H_post, x, H_res, n, use_tf32, fused_grad_x_acc_buffer)."""

    @staticmethod
    def apply(f, bias, H_post, x, H_res, n, use_tf32=True, fused_grad_x_acc_buffer=None):
        return mhc_fused_expand_combine(f, bias, H_post, x, H_res, n, use_tf32, fused_grad_x_acc_buffer)
