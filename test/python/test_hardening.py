"""Bad or edge-case input to the PyTorch package (CPU): a clear exception
naming the argument and what is expected, or a correct result. Mixed
devices, M = 0, degenerate shapes, out-of-range scalars, None; and double
backward, which the ops do not support and say so."""

import math
import warnings

import pytest
import torch

import mhc
from mhc import reference as ref

INF, NAN = float("inf"), float("nan")


def rel(a, b):
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm().clamp_min(1e-300)).item()


def params(n, C, dtype=torch.float32):
    N, K = 2 * n + n * n, n * C
    return dict(phi=(torch.randn(N, K) / math.sqrt(K)).to(dtype), alpha=(torch.rand(3) + 0.5).to(dtype),
                beta=(0.5 * torch.randn(N)).to(dtype), weight=(1 + 0.1 * torch.randn(K)).to(dtype))


def op_args(M=3, n=2, C=8):
    """Every torch.ops.mhc op with valid float32 inputs, and its tensor
    arguments' names in the order of its schema."""
    p, N = params(n, C), 2 * n + n * n
    x, f = torch.randn(M, n, C), torch.randn(M, C)
    h, ms, pre, post = torch.randn(M, N), torch.rand(M) + 0.5, torch.rand(M, n), torch.rand(M, n)
    L, P, bias = torch.randn(M, n, n), torch.softmax(torch.randn(M, n, n), -2), torch.randn(C)
    e, s = (1e-6, 1e-6, 2.0), ("log", 3, 0.0)
    pre_args = (x, p["phi"], p["alpha"], p["beta"], p["weight"], n, "nc", False, *e, *s)
    return {
        "project": (x, p["phi"], p["weight"], n, "nc", False),
        "project_backward": (h, ms, x, p["phi"], p["weight"], n, "nc", False),
        "scale": (h, ms, p["alpha"], p["beta"], n, *e),
        "scale_backward": (pre, post, L, h, ms, p["alpha"], p["beta"], n, *e),
        "sinkhorn": (L, n, *s),
        "sinkhorn_backward": (L.clone(), L, n, *s),
        "aggregate": (x, pre, n, "nc"),
        "aggregate_backward": (f, x, pre, n, "nc"),
        "expand_combine": (f, post, x, P, bias, n, "nc"),
        "expand_combine_backward": (torch.randn(M, n, C), f, post, x, P, bias, n, "nc"),
        "pre": pre_args,
        "pre_saved": pre_args,
        "pre_backward": (f, post, P, x, h, ms, pre, L, p["phi"], p["alpha"], p["beta"], p["weight"],
                         torch.randn(M, n, C), n, "nc", False, *e, *s),
        # TE's f32 x-gradient buffer, the kwarg-only last argument (call_op).
        "aggregate_backward_into": (f, x, pre, n, "nc", torch.randn(M, n, C)),
        "expand_combine_backward_into": (torch.randn(M, n, C), f, post, x, P, bias, n, "nc", torch.randn(M, n, C)),
    }


def call_op(op, args):
    """torch.ops.mhc.<op> with `args` in schema order, kwarg-only ones by name."""
    schema = getattr(torch.ops.mhc, op).default._schema.arguments
    npos = sum(not a.kwarg_only for a in schema)
    return getattr(torch.ops.mhc, op)(*args[:npos], **{a.name: v for a, v in zip(schema[npos:], args[npos:])})


def arg_names(op):
    return [a.name for a in getattr(torch.ops.mhc, op).default._schema.arguments]


# --- devices -----------------------------------------------------------------

@pytest.mark.parametrize("op", sorted(op_args()))
def test_meta_tensor_among_cpu_tensors_names_the_argument(op):
    """Meta and CPU tensors in one call (the dispatcher picks the meta
    kernel) raise, naming the odd argument and the device expected, for
    each tensor argument in turn; all-meta calls give meta results."""
    args, names = op_args()[op], arg_names(op)
    tensors = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
    for i in tensors if len(tensors) > 1 else []:  # (sinkhorn has one tensor)
        a = args[i]
        bad = list(args)
        bad[i] = a.to("meta")
        with pytest.raises(ValueError, match=r"argument '\w+' is on (meta|cpu) but the other tensors are on "
                                             r"(cpu|meta)") as e:
            call_op(op, bad)
        assert f"'{names[i]}' is on meta" in str(e.value) or "is on cpu but the other tensors are on meta" in str(
            e.value)
    out = call_op(op, tuple(a.to("meta") if isinstance(a, torch.Tensor) else a for a in args))
    assert all(o.device.type == "meta" for o in (out if isinstance(out, tuple) else (out,)))


def test_python_api_with_mixed_devices_names_the_argument():
    n, C = 2, 8
    p, x = params(n, C), torch.randn(3, n, C)
    with pytest.raises(ValueError, match=r"mhc.project: argument 'phi' is on meta but the other tensors are on cpu"):
        mhc.project(x, p["phi"].to("meta"))
    with pytest.raises(ValueError, match=r"mhc.pre: argument 'beta' is on meta but the other tensors are on cpu"):
        mhc.pre(x, p["phi"], p["alpha"], p["beta"].to("meta"))
    hc = mhc.HyperConnection(n, C)
    with pytest.raises(ValueError, match=r"mhc.pre: argument 'phi' is on cpu but the other tensors are on meta"):
        hc(x.to("meta"), torch.tanh)


# --- M = 0 -----------------------------------------------------------------------

@pytest.mark.parametrize("layout", ["nc", "cn"])
@pytest.mark.parametrize("lead", [(0,), (0, 3), (2, 0)])
def test_no_tokens_forward_and_backward(layout, lead):
    """M = 0 gives correctly shaped empty results, and gradients: empty for
    per-token inputs, zeros (a sum over no tokens) for the parameters, through
    mhc.*, HyperConnection and mhc.te."""
    n, C = 3, 4
    N = 2 * n + n * n
    shape = (*lead, n, C) if layout == "nc" else (*lead, C, n)
    x = torch.randn(shape, requires_grad=True)
    p = {k: v.requires_grad_() for k, v in params(n, C).items()}
    bias = torch.randn(C, requires_grad=True)
    h, ms = mhc.project(x, p["phi"], p["weight"], layout=layout)
    assert h.shape == (*lead, N) and ms.shape == lead
    pre_w, post_w, L = mhc.scale(h, ms, p["alpha"], p["beta"])
    assert pre_w.shape == post_w.shape == (*lead, n) and L.shape == (*lead, n, n)
    P = mhc.sinkhorn(L)
    y = mhc.aggregate(x, pre_w, layout=layout)
    out = mhc.expand_combine(torch.tanh(y), post_w, x, P, bias, layout=layout)
    assert y.shape == (*lead, C) and P.shape == (*lead, n, n) and out.shape == shape
    y2, post2, P2 = mhc.pre(x, p["phi"], p["alpha"], p["beta"], p["weight"], layout=layout)
    assert (y2.shape, post2.shape, P2.shape) == (y.shape, post_w.shape, P.shape)
    total = out.sum() + y2.sum() + post2.sum() + P2.sum()
    leaves = [x, bias, *p.values()]
    grads = torch.autograd.grad(total, leaves)
    assert grads[0].shape == x.shape
    for g, leaf in zip(grads[1:], leaves[1:]):
        assert g.shape == leaf.shape and torch.equal(g, torch.zeros_like(leaf))
    hc = mhc.HyperConnection(n, C, layout=layout, bias=True)
    z = hc(x, torch.tanh)
    assert z.shape == shape
    z.sum().backward()
    assert torch.equal(hc.phi.grad, torch.zeros_like(hc.phi)) and torch.equal(hc.bias.grad, torch.zeros(C))


def test_no_tokens_through_torch_ops_and_te():
    """Every torch.ops.mhc op, forward and backward, with M = 0: empty
    per-token outputs, zero parameter gradients."""
    for op, args in op_args(M=0).items():
        out = call_op(op, args)
        for o in out if isinstance(out, tuple) else (out,):
            if o.dim() and o.shape[0] == 0:
                continue
            assert torch.equal(o, torch.zeros_like(o)), op  # gphi, gw, galpha, gbeta, gbias
    n, C = 4, 8
    x = torch.randn(0, 2, C, n)  # (s, b, C, n) with s = 0
    p = params(n, C)
    H, ms = mhc.mhc_fused_projection(x.reshape(0, C * n), p["phi"])
    h_pre, h_post, h_res = mhc.mhc_fused_scale(H, p["alpha"], p["beta"], ms, n)
    assert H.shape == (0, 32) and h_res.shape == (0, n * n)  # TE pads H to 32 columns
    P = mhc.mhc_fused_sinkhorn(h_res.view(0, 2, n, n), n)
    y = mhc.mhc_fused_aggregate(x, h_pre.view(0, 2, n), n)
    out = mhc.mhc_fused_expand_combine(y, None, h_post.view(0, 2, n), x, P, n)
    assert P.shape == (0, 2, n, n) and y.shape == (0, 2, C) and out.shape == x.shape
    y2, post2, P2 = mhc.mhc_generate_mix_and_aggregate(x, p["phi"], p["alpha"], p["beta"])
    assert y2.shape == (0, 2, C) and post2.shape == (0, 2, n) and P2.shape == (0, 2, n, n)


# --- degenerate shapes and out-of-range arguments --------------------------------

def test_degenerate_shapes_name_the_argument():
    with pytest.raises(ValueError, match=r"argument 'logits' must be a tensor \[\.\.\., n, n\]"):
        mhc.sinkhorn(torch.tensor(1.0))
    with pytest.raises(ValueError, match=r"argument 'logits' must be a tensor \[\.\.\., n, n\]"):
        mhc.sinkhorn(torch.randn(3, 3))
    with pytest.raises(ValueError, match=r"argument 'h' must be a tensor \[\.\.\., N\]"):
        mhc.scale(torch.tensor(1.0), torch.rand(1), torch.rand(3), torch.rand(8))
    with pytest.raises(ValueError, match=r"mhc.project: argument 'x' must have C >= 1 channels; got shape \[3, 4, 0\]"):
        mhc.project(torch.randn(3, 4, 0), torch.randn(24, 0))
    with pytest.raises(ValueError, match=r"mhc.pre: argument 'x' must have C >= 1 channels"):
        mhc.pre(torch.randn(3, 0, 2), torch.randn(8, 0), torch.rand(3), torch.rand(8), layout="cn")
    with pytest.raises(ValueError, match=r"argument 'C' must be >= 1; got 0"):
        mhc.HyperConnection(n=2, C=0)


def test_stream_count_out_of_range():
    """n past the dialect's 1..1024 (or one whose 2n + n^2 overflows)."""
    big = 2 ** 40
    with pytest.raises(ValueError, match=r"mhc.sinkhorn: n must be >= 1 and <= 1024; got 1099511627776"):
        torch.ops.mhc.sinkhorn(torch.randn(1, 2, 2), big, "log", 2, 0.0)
    with pytest.raises(ValueError, match=r"mhc.project: n must be >= 1 and <= 1024; got 2049"):
        torch.ops.mhc.project(torch.randn(1, 2049, 1), torch.randn(1, 1), None, 2049, "nc", False)
    with pytest.raises(ValueError, match=r"mhc.project: n must be >= 1 and <= 1024; got 1099511627776"):
        torch.ops.mhc.project(torch.randn(1, 2, 2, device="meta"), torch.randn(8, 4, device="meta"), None, big, "nc",
                              False)
    with pytest.raises(ValueError, match=r"argument 'n' must be >= 1 and <= 1024; got 1099511627776"):
        mhc.HyperConnection(n=big, C=1)
    with pytest.raises(TypeError, match=r"argument 'n' must be an integer; got 2.5"):
        mhc.HyperConnection(n=2.5, C=4)


@pytest.mark.parametrize("value", [INF, -INF, NAN, -1.0])
@pytest.mark.parametrize("name", ["norm_eps", "pre_eps", "post_mult", "eps"])
def test_scalars_outside_the_dialects_range(name, value):
    """norm_eps, pre_eps, eps: finite and >= 0; post_mult: finite and > 0 (as the dialect's verifiers)."""
    n, C = 2, 8
    p, x = params(n, C), torch.randn(3, n, C)
    msg = rf"{name} must be (finite and )?(>= 0|> 0); got {value:g}"
    with pytest.raises(ValueError, match=r"mhc.pre: " + msg):
        mhc.pre(x, p["phi"], p["alpha"], p["beta"], **{name: value})
    if name == "eps":
        with pytest.raises(ValueError, match=r"mhc.sinkhorn: " + msg):
            mhc.sinkhorn(torch.randn(3, n, n), eps=value)
        with pytest.raises(ValueError, match=r"mhc.sinkhorn_backward: " + msg):
            torch.ops.mhc.sinkhorn_backward(torch.randn(3, n, n), torch.randn(3, n, n), n, "softmax_eps", 3, value)
    else:
        h, ms = torch.randn(3, 8), torch.rand(3)
        with pytest.raises(ValueError, match=r"mhc.scale: " + msg):
            mhc.scale(h, ms, p["alpha"], p["beta"], **{name: value})
        with pytest.raises(ValueError, match=r"mhc.scale_backward: " + msg):
            kw = {**dict(norm_eps=1e-6, pre_eps=1e-6, post_mult=2.0), name: value}
            torch.ops.mhc.scale_backward(torch.rand(3, n), torch.rand(3, n), torch.rand(3, n, n), h, ms, p["alpha"],
                                         p["beta"], n, kw["norm_eps"], kw["pre_eps"], kw["post_mult"])


def test_post_mult_zero_and_the_limits_that_are_accepted():
    n, C = 2, 8
    p, x = params(n, C), torch.randn(3, n, C)
    with pytest.raises(ValueError, match=r"mhc.pre: post_mult must be > 0; got 0"):
        mhc.pre(x, p["phi"], p["alpha"], p["beta"], post_mult=0.0)
    # The edges of the ranges run, and match float64 MATH.md.
    h64, ms64 = ref.project(x.double(), p["phi"].double())
    pre, post, L = mhc.scale(h64.float(), ms64.float(), p["alpha"], p["beta"], norm_eps=0.0, pre_eps=0.0,
                             post_mult=1e-30)
    want = ref.scale(h64, ms64, p["alpha"].double(), p["beta"].double(), n, 0.0, 0.0, 1e-30)
    for a, b in zip((pre, post, L), want):
        assert rel(a, b) <= 1e-5


def test_iters_must_be_an_integer():
    L = torch.randn(3, 3, 3)
    for bad in (2.5, 2.0, "3", True, None):
        with pytest.raises(TypeError, match=r"argument 'iters' must be an integer; got"):
            mhc.sinkhorn(L, iters=bad)
    with pytest.raises(TypeError, match=r"argument 'iters' must be an integer; got 2.5"):
        mhc.pre(torch.randn(3, 2, 4), **{k: v for k, v in params(2, 4).items() if k != "weight"}, iters=2.5)
    with pytest.raises(TypeError, match=r"argument 'iters' must be an integer"):
        mhc.HyperConnection(2, 4, iters=2.5)(torch.randn(3, 2, 4), torch.tanh)
    with pytest.raises(RuntimeError, match=r"'int' for argument 'iters'"):
        torch.ops.mhc.sinkhorn(L, 3, "log", 2.5, 0.0)
    with pytest.raises(ValueError, match=r"iters must be >= 1; got -2"):
        mhc.sinkhorn(L, iters=-2)
    for bad in ("1e-6", None):
        with pytest.raises(TypeError, match=r"argument 'eps' must be a real number; got"):
            mhc.sinkhorn(L, eps=bad)
    P = mhc.sinkhorn(L, mode="log", iters=torch.tensor(3).item())  # integral types other than int
    assert rel(P, ref.sinkhorn(L.double(), "log", 3)) <= 1e-5


def test_none_where_a_tensor_is_required():
    n, C = 2, 8
    p, x = params(n, C), torch.randn(3, n, C)
    with pytest.raises(TypeError, match=r"mhc.aggregate: argument 'pre' must be a tensor; got None"):
        mhc.aggregate(x, None)
    with pytest.raises(TypeError, match=r"mhc.aggregate: argument 'pre' must be a tensor; got None"):
        torch.ops.mhc.aggregate(x, None, n, "nc")
    with pytest.raises(TypeError, match=r"mhc.pre: argument 'alpha' must be a tensor; got None"):
        mhc.pre(x, p["phi"], None, p["beta"])
    with pytest.raises(TypeError, match=r"mhc.expand_combine: argument 'P' must be a tensor; got None"):
        mhc.post(torch.randn(3, C), torch.rand(3, n), x, None)
    with pytest.raises(TypeError, match=r"mhc.aggregate: argument 'x' must be a tensor; got None"):
        torch.ops.mhc.aggregate(None, torch.rand(3, n), n, "nc")


def test_float64_is_all_or_nothing():
    """float64 (the reference path) needs every tensor of the call in
    float64: a mix would be computed in float32 and returned in float64."""
    n, C = 2, 8
    p, x = params(n, C), torch.randn(3, n, C)
    with pytest.raises(TypeError, match=r"mhc.project: argument 'phi' must be a float64 tensor, as 'x' is"):
        mhc.project(x.double(), p["phi"])
    with pytest.raises(TypeError, match=r"mhc.project: argument 'phi' must be a float32 or bfloat16 tensor; got "
                                        r"Double \(float64 needs every tensor in float64\)"):
        mhc.project(x, p["phi"].double())
    with pytest.raises(TypeError, match=r"mhc.expand_combine: argument 'post' must be a float64 tensor, as 'x' is"):
        mhc.post(torch.randn(3, C).double(), torch.rand(3, n), x.double(), torch.rand(3, n, n).double())


# --- double backward -------------------------------------------------------------

def _first_order_cases():
    """(name, function of the leaves, the leaves) in float64, one per op."""
    n, C, M = 2, 4, 3
    p = {k: v.double() for k, v in params(n, C).items()}
    x = torch.randn(M, n, C, dtype=torch.float64)
    h, ms = torch.randn(M, 8, dtype=torch.float64), torch.rand(M, dtype=torch.float64) + 0.5
    L, pre = torch.randn(M, n, n, dtype=torch.float64), torch.rand(M, n, dtype=torch.float64)
    f, post = torch.randn(M, C, dtype=torch.float64), torch.rand(M, n, dtype=torch.float64)
    return [
        ("project", lambda x, phi, w: mhc.project(x, phi, w), [x, p["phi"], p["weight"]]),
        ("scale", lambda h, ms, a, b: mhc.scale(h, ms, a, b), [h, ms, p["alpha"], p["beta"]]),
        ("sinkhorn", lambda L: mhc.sinkhorn(L, iters=4), [L]),
        ("aggregate", lambda x, pre: mhc.aggregate(x, pre), [x, pre]),
        ("expand_combine", lambda f, post, x, P: mhc.post(f, post, x, P), [f, post, x, L.softmax(-2)]),
        (r"\w+", lambda x, phi, a, b: mhc.pre(x, phi, a, b, iters=3), [x, p["phi"], p["alpha"], p["beta"]]),
    ]


@pytest.mark.parametrize("case", range(6))
def test_first_order_works_and_second_order_raises(case):
    """First-order gradients are the same with create_graph False and True
    (and gradcheck passes); differentiating them again raises a clear error
    instead of PyTorch's deprecated fallthrough (silently wrong)."""
    name, fn, leaves = _first_order_cases()[case]
    leaves = [t.requires_grad_() for t in leaves]
    out = fn(*leaves)
    outs = out if isinstance(out, tuple) else (out,)
    gouts = [torch.randn_like(o) for o in outs]
    first = torch.autograd.grad(outs, leaves, gouts)
    assert torch.autograd.gradcheck(fn, leaves, eps=1e-6, atol=1e-6, rtol=1e-5)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        graph = torch.autograd.grad(fn(*leaves), leaves, gouts, create_graph=True)
        for a, b in zip(graph, first):
            assert torch.equal(a, b)
        with pytest.raises(RuntimeError, match=rf"mhc: double backward \(second-order gradients\) is not supported "
                                               rf"by mhc\.{name}"):
            torch.autograd.grad(sum(g.sum() for g in graph), leaves, allow_unused=True)
        with pytest.raises(RuntimeError, match=r"double backward \(second-order gradients\) is not supported"):
            torch.autograd.gradgradcheck(fn, leaves, eps=1e-6, atol=1e-6, rtol=1e-5)
    # (PyTorch's fallthrough for an op without an autograd kernel warns so.)
    assert not [w for w in seen if "autograd kernel was not registered" in str(w.message)]


def test_double_backward_of_a_backward_op_called_directly():
    n, M = 2, 3
    L = torch.randn(M, n, n, dtype=torch.float64, requires_grad=True)
    gP = torch.randn(M, n, n, dtype=torch.float64, requires_grad=True)
    with torch.no_grad():
        g0 = torch.ops.mhc.sinkhorn_backward(gP, L, n, "log", 4, 0.0)
    g = torch.ops.mhc.sinkhorn_backward(gP, L, n, "log", 4, 0.0)
    assert g.requires_grad and torch.equal(g.detach(), g0)
    with pytest.raises(RuntimeError, match=r"not supported by mhc\.sinkhorn \(mhc\.sinkhorn_backward has no gradient\)"):
        g.sum().backward()
