"""The mhc dialect's form of each torch.ops.mhc.* op for mhc.export: each
function takes the emitter (_export_graph._Emitter) and the op's arguments
in schema order and writes the dialect's ops (the fused torch ops as their
parts, the *_backward ops as *_grad ops with acc operands)."""

from . import _C
from ._export_types import _f32, _shape, _tensor

def _opt(keyword, name):
    return f" {keyword} {name}" if name else ""


class _Attrs:
    """The dialect's attribute dictionaries, from the torch ops' arguments."""

    @staticmethod
    def scale(n, norm_eps, pre_eps, post_mult):
        return (f"n = {n} : i64, norm_eps = {_f32(norm_eps)}, pre_eps = {_f32(pre_eps)}, "
                f"post_mult = {_f32(post_mult)}")

    @staticmethod
    def sinkhorn(n, iters, eps, mode):
        return f"n = {n} : i64, iters = {iters} : i64" + (f", eps = {_f32(eps)}" if mode == "softmax_eps" else "")

    @staticmethod
    def project(n, tf32):
        return f"n = {n} : i64" + (", tf32" if tf32 else "")


def _streams(e, x, layout):
    """(M, C, activation element type, mixing element type) of streams x."""
    dims, element = _shape(e.types[x])
    return dims[0], dims[2] if layout == "nc" else dims[1], element, "f64" if element == "f64" else "f32"


# Each helper takes SSA names (None for an absent optional tensor) and the
# torch op's other arguments, appends the dialect op(s) and returns the
# result names in the torch op's order.

def _project(e, x, phi, weight, n, layout, tf32):
    M, _, _, mix = _streams(e, x, layout)
    return tuple(e.op([("h", _tensor([M, _C.num_logits(n)], mix)), ("ms", _tensor([M], mix))],
                      f"mhc.project {layout} {x}, {phi}{_opt('weight', weight)}", [x, phi, weight],
                      _Attrs.project(n, tf32)))


def _scale(e, h, ms, alpha, beta, n, norm_eps, pre_eps, post_mult):
    (M, _), mix = _shape(e.types[h])
    vec, mat = _tensor([M, n], mix), _tensor([M, n, n], mix)
    return tuple(e.op([("pre", vec), ("post", vec), ("logits", mat)], f"mhc.scale {h}, {ms}, {alpha}, {beta}",
                      [h, ms, alpha, beta], _Attrs.scale(n, norm_eps, pre_eps, post_mult)))


def _sinkhorn(e, logits, n, mode, iters, eps):
    return e.op([("P", e.types[logits])], f"mhc.sinkhorn {mode} {logits}", [logits],
                _Attrs.sinkhorn(n, iters, eps, mode))[0]


def _aggregate(e, x, pre, n, layout):
    M, C, act, _ = _streams(e, x, layout)
    return e.op([("y", _tensor([M, C], act))], f"mhc.aggregate {layout} {x}, {pre}", [x, pre], f"n = {n} : i64")[0]


def _expand_combine(e, f, post, x, P, bias, n, layout):
    return e.op([("x_next", e.types[x])], f"mhc.expand_combine {layout} {f}, {post}, {x}, {P}{_opt('bias', bias)}",
                [f, post, x, P, bias], f"n = {n} : i64")[0]


def _pre_saved(e, x, phi, alpha, beta, weight, n, layout, tf32, norm_eps, pre_eps, post_mult, mode, iters, eps):
    """The pre step as its four ops: (y, post, P, h, ms, pre, logits)."""
    h, ms = _project(e, x, phi, weight, n, layout, tf32)
    pre, post, logits = _scale(e, h, ms, alpha, beta, n, norm_eps, pre_eps, post_mult)
    P = _sinkhorn(e, logits, n, mode, iters, eps)
    return _aggregate(e, x, pre, n, layout), post, P, h, ms, pre, logits


def _post_pre_saved(e, f, post, x, P, bias, phi, alpha, beta, weight, n, layout, *pre_attrs):
    """expand_combine, then the pre step of x_next: the contract's eight
    results (x_next, h, ms, pre, post_next, logits, P_next, y)."""
    x_next = _expand_combine(e, f, post, x, P, bias, n, layout)
    y, post_next, P_next, h, ms, pre, logits = _pre_saved(e, x_next, phi, alpha, beta, weight, n, layout, *pre_attrs)
    return x_next, h, ms, pre, post_next, logits, P_next, y


def _post_pre(e, *args):
    x_next, _, _, _, post_next, _, P_next, y = _post_pre_saved(e, *args)
    return x_next, y, post_next, P_next


# The backward ops' optional `acc` (x's gradient from its other users, summed
# in the kernel) is the dialect ops' `acc` operand.

def _project_grad(e, gh, gms, x, phi, weight, n, layout, tf32, acc=None):
    results = [("gx", e.types[x]), ("gphi", e.types[phi])] + ([("gweight", e.types[weight])] if weight else [])
    out = e.op(results, f"mhc.project_grad {layout} {gh}, {gms}, {x}, {phi}{_opt('weight', weight)}{_opt('acc', acc)}",
               [gh, gms, x, phi, weight, acc], _Attrs.project(n, tf32))
    return out[0], out[1], out[2] if weight else None


def _scale_grad(e, gpre, gpost, glogits, h, ms, alpha, beta, n, norm_eps, pre_eps, post_mult):
    operands = [gpre, gpost, glogits, h, ms, alpha, beta]
    return tuple(e.op([("gh", e.types[h]), ("gms", e.types[ms]), ("galpha", e.types[alpha]),
                       ("gbeta", e.types[beta])], "mhc.scale_grad " + ", ".join(operands), operands,
                      _Attrs.scale(n, norm_eps, pre_eps, post_mult)))


def _sinkhorn_grad(e, gP, logits, n, mode, iters, eps):
    return e.op([("glogits", e.types[logits])], f"mhc.sinkhorn_grad {mode} {gP}, {logits}", [gP, logits],
                _Attrs.sinkhorn(n, iters, eps, mode))[0]


def _aggregate_grad(e, gy, x, pre, n, layout, acc=None):
    return tuple(e.op([("gx", e.types[x]), ("gpre", e.types[pre])],
                      f"mhc.aggregate_grad {layout} {gy}, {x}, {pre}{_opt('acc', acc)}", [gy, x, pre, acc],
                      f"n = {n} : i64"))


def _expand_combine_grad(e, gout, f, post, x, P, bias, n, layout, acc=None):
    results = [("gf", e.types[f]), ("gpost", e.types[post]), ("gx", e.types[x]), ("gP", e.types[P])]
    results += [("gbias", e.types[bias])] if bias else []
    out = e.op(results, f"mhc.expand_combine_grad {layout} {gout}, {f}, {post}, {x}, {P}{_opt('bias', bias)}"
               f"{_opt('acc', acc)}", [gout, f, post, x, P, bias, acc], f"n = {n} : i64")
    return tuple(out[:4]) + (out[4] if bias else None,)


def _post_pre_grad(e, gx_next, gy, gpost_next, gP_next, f, post, x, P, bias, x_next, h, ms, pre, logits, phi,
                   alpha, beta, weight, n, layout, tf32, norm_eps, pre_eps, post_mult, mode, iters, eps):
    """The seam's gradient as the ops it replaces, x_next's gradients summed
    through acc (seam.md, SeamOps.cpp's seamGradSteps): (gx, gf, gpost, gP,
    gbias, gphi, galpha, gbeta, gweight)."""
    g1, gpre = _aggregate_grad(e, gy, x_next, pre, n, layout, acc=gx_next)
    glogits = _sinkhorn_grad(e, gP_next, logits, n, mode, iters, eps)
    gh, gms, galpha, gbeta = _scale_grad(e, gpre, gpost_next, glogits, h, ms, alpha, beta, n, norm_eps, pre_eps,
                                         post_mult)
    g, gphi, gweight = _project_grad(e, gh, gms, x_next, phi, weight, n, layout, tf32, acc=g1)
    gf, gpost, gx, gP, gbias = _expand_combine_grad(e, g, f, post, x, P, bias, n, layout)
    return gx, gf, gpost, gP, gbias, gphi, galpha, gbeta, gweight


def _pre_grad(e, gy, gpost, gP, x, h, ms, pre, logits, phi, alpha, beta, weight, acc, n, layout, tf32, norm_eps,
              pre_eps, post_mult, mode, iters, eps):
    """The pre step's gradient as the ops pre.bwd replaces, aggregate's gx
    as project's acc (PreBackwardOps.cpp's preGradSteps): (gx, gphi,
    galpha, gbeta, gweight). An acc of another type than x (TE's f32
    buffer) has no dialect form, as aggregate_backward_into has none."""
    if acc is not None and e.types[acc] != e.types[x]:
        raise ValueError("mhc.export: no dialect form for torch.ops.mhc.pre_backward with an f32 acc "
                         "(TE's fused_grad_x_acc_buffer) on x of another dtype")
    g1, gpre = _aggregate_grad(e, gy, x, pre, n, layout, acc=acc)
    glogits = _sinkhorn_grad(e, gP, logits, n, mode, iters, eps)
    gh, gms, galpha, gbeta = _scale_grad(e, gpre, gpost, glogits, h, ms, alpha, beta, n, norm_eps, pre_eps,
                                         post_mult)
    gx, gphi, gweight = _project_grad(e, gh, gms, x, phi, weight, n, layout, tf32, acc=g1)
    return gx, gphi, galpha, gbeta, gweight


_MHC_OPS = {
    "project": _project,
    "scale": _scale,
    "sinkhorn": _sinkhorn,
    "aggregate": _aggregate,
    "expand_combine": _expand_combine,
    "pre": lambda e, *a: _pre_saved(e, *a)[:3],
    "pre_saved": _pre_saved,
    "post_pre": _post_pre,
    "post_pre_saved": _post_pre_saved,
    "project_backward": _project_grad,
    "scale_backward": _scale_grad,
    "sinkhorn_backward": _sinkhorn_grad,
    "aggregate_backward": _aggregate_grad,
    "expand_combine_backward": _expand_combine_grad,
    "pre_backward": _pre_grad,
    "post_pre_backward": _post_pre_grad,
}
