"""CPU-side tests of the PyTorch package (no GPU): the ATen reference path
against float64 MATH.md, gradients (gradcheck in float64 and against the
float64 oracle), opcheck of every op, torch.compile(fullgraph=True), the
Transformer Engine aliases, and errors for bad inputs."""

import math

import pytest
import torch

import mhc
from dispatch_modes import DispatchMode, FunctionMode
from mhc import reference as ref

torch.manual_seed(0)  # reproducible failures; every test draws fresh data


def rel(a, b):
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm().clamp_min(1e-300)).item()


def streams_shape(M, n, C, layout):
    return (M, n, C) if layout == "nc" else (M, C, n)


def inputs(M, n, C, layout, dtype=torch.float32):
    N, K = 2 * n + n * n, n * C
    return dict(
        x=torch.randn(*streams_shape(M, n, C, layout)).to(dtype),
        phi=torch.randn(N, K) / math.sqrt(K),
        weight=1 + 0.1 * torch.randn(K),
        alpha=torch.rand(3) + 0.5,
        beta=0.5 * torch.randn(N),
        f=torch.randn(M, C).to(dtype),
        bias=0.5 * torch.randn(C),
    )


CASES = [(7, 4, 16, "nc"), (5, 3, 10, "cn"), (3, 8, 8, "nc"), (4, 2, 12, "cn"), (2, 1, 8, "nc")]


@pytest.mark.parametrize("M,n,C,layout", CASES)
def test_forward_matches_float64(M, n, C, layout):
    t = inputs(M, n, C, layout)
    h, ms = torch.ops.mhc.project(t["x"], t["phi"], t["weight"], n, layout, False)
    h64, ms64 = ref.project(t["x"].double(), t["phi"].double(), t["weight"].double())
    assert rel(h, h64) <= 1e-5 and rel(ms, ms64) <= 1e-5
    pre, post, logits = torch.ops.mhc.scale(h64.float(), ms64.float(), t["alpha"], t["beta"], n, 1e-6, 1e-6, 2.0)
    pre64, post64, logits64 = ref.scale(h64, ms64, t["alpha"].double(), t["beta"].double(), n)
    for a, b in ((pre, pre64), (post, post64), (logits, logits64)):
        assert rel(a, b) <= 1e-5
    for mode in ("log", "softmax_eps"):
        P = torch.ops.mhc.sinkhorn(logits64.float(), n, mode, 20, 1e-6)
        P64 = ref.sinkhorn(logits64, mode, 20, 1e-6)
        assert rel(P, P64) <= 1e-5
        assert torch.allclose(P.sum(-2), torch.ones(M, n), atol=1e-5)  # columns sum to 1
    y = torch.ops.mhc.aggregate(t["x"], pre64.float(), n, layout)
    assert rel(y, ref.aggregate(t["x"].double(), pre64, layout)) <= 1e-5
    out = torch.ops.mhc.expand_combine(t["f"], post64.float(), t["x"], P64.float(), t["bias"], n, layout)
    out64 = ref.expand_combine(t["f"].double(), post64, t["x"].double(), P64, t["bias"].double(), layout)
    assert rel(out, out64) <= 1e-5


@pytest.mark.parametrize("M,n,C,layout", CASES[:3])
def test_backward_ops_match_float64_autograd(M, n, C, layout):
    t = {k: v.double().requires_grad_() for k, v in inputs(M, n, C, layout).items()}
    N = 2 * n + n * n
    gh, gms = torch.randn(M, N, dtype=torch.float64), torch.randn(M, dtype=torch.float64)
    h, ms = ref.project(t["x"], t["phi"], t["weight"])
    want = torch.autograd.grad((h, ms), (t["x"], t["phi"], t["weight"]), (gh, gms))
    got = torch.ops.mhc.project_backward(gh.float(), gms.float(), t["x"].detach().float(),
                                         t["phi"].detach().float(), t["weight"].detach().float(), n, layout, False)
    for a, b in zip(got, want):
        assert rel(a, b) <= 1e-5
    for mode in ("log", "softmax_eps"):
        L = (2 * torch.randn(M, n, n, dtype=torch.float64)).requires_grad_()
        gP = torch.randn(M, n, n, dtype=torch.float64)
        (want,) = torch.autograd.grad(ref.sinkhorn(L, mode, 20, 1e-6), L, gP)
        got = torch.ops.mhc.sinkhorn_backward(gP.float(), L.detach().float(), n, mode, 20, 1e-6)
        assert rel(got, want) <= 1e-5


@pytest.mark.parametrize("layout", ["nc", "cn"])
@pytest.mark.parametrize("mode", ["log", "softmax_eps"])
def test_gradcheck_whole_layer_float64(layout, mode):
    """Finite differences through every op's autograd formula (float64)."""
    M, n, C = 3, 3, 4
    t = {k: v.double().requires_grad_() for k, v in inputs(M, n, C, layout).items()}

    def layer(x, phi, weight, alpha, beta, bias):
        y, post, P = mhc.pre(x, phi, alpha, beta, weight, layout=layout, mode=mode, iters=5)
        return mhc.post(torch.tanh(y), post, x, P, bias, layout=layout)

    args = (t["x"], t["phi"], t["weight"], t["alpha"], t["beta"], t["bias"])
    assert torch.autograd.gradcheck(layer, args, eps=1e-6, atol=1e-6, rtol=1e-5)


def _samples():
    M, n, C = 3, 2, 8
    t = inputs(M, n, C, "nc")
    N = 2 * n + n * n
    h = torch.randn(M, N)
    ms = torch.rand(M) + 0.5
    L = torch.randn(M, n, n)
    pre = torch.rand(M, n)
    post = torch.rand(M, n)
    P = torch.softmax(torch.randn(M, n, n), -1)
    return {
        "project": (t["x"], t["phi"], t["weight"], n, "nc", False),
        "project_backward": (h, ms, t["x"], t["phi"], None, n, "nc", True),
        "scale": (h, ms, t["alpha"], t["beta"], n, 1e-6, 1e-6, 2.0),
        "scale_backward": (pre, post, L, h, ms, t["alpha"], t["beta"], n, 1e-6, 0.0, 2.0),
        "sinkhorn": (L, n, "log", 5, 0.0),
        "sinkhorn_backward": (torch.randn(M, n, n), L, n, "softmax_eps", 5, 1e-6),
        "aggregate": (t["x"], pre, n, "nc"),
        "aggregate_backward": (t["f"], t["x"], pre, n, "nc"),
        "expand_combine": (t["f"], post, t["x"], P, t["bias"], n, "nc"),
        "expand_combine_backward": (t["x"], t["f"], post, t["x"], P, None, n, "nc"),
        "pre": (t["x"], t["phi"], t["alpha"], t["beta"], t["weight"], n, "nc", False, 1e-6, 1e-6, 2.0, "log", 5,
                0.0),
        "pre_saved": (t["x"], t["phi"], t["alpha"], t["beta"], t["weight"], n, "nc", False, 1e-6, 1e-6, 2.0, "log",
                      5, 0.0),
    }


@pytest.mark.parametrize("op", sorted(_samples()))
def test_opcheck(op):
    args = _samples()[op]
    args = tuple(a.requires_grad_() if isinstance(a, torch.Tensor) and not op.endswith("backward") else a
                 for a in args)
    torch.library.opcheck(getattr(torch.ops.mhc, op), args)


@pytest.mark.parametrize("layout", ["nc", "cn"])
def test_pre_is_the_four_ops(layout):
    """torch.ops.mhc.pre gives what project, scale, sinkhorn, aggregate give, bit for bit, with gradients."""
    M, n, C = 5, 3, 8
    t = {k: v.requires_grad_() for k, v in inputs(M, n, C, layout).items()}
    kw = dict(norm_eps=1e-5, pre_eps=1e-6, post_mult=2.0)
    got = mhc.pre(t["x"], t["phi"], t["alpha"], t["beta"], t["weight"], layout=layout, mode="softmax_eps", iters=7,
                  eps=1e-6, **kw)
    h, ms = mhc.project(t["x"], t["phi"], t["weight"], layout=layout)
    pre_w, post_w, L = mhc.scale(h, ms, t["alpha"], t["beta"], **kw)
    want = (mhc.aggregate(t["x"], pre_w, layout=layout), post_w, mhc.sinkhorn(L, mode="softmax_eps", iters=7))
    for a, b in zip(got, want):
        assert a.shape == b.shape and torch.equal(a, b)
    leaves = [t[k] for k in ("x", "phi", "weight", "alpha", "beta")]
    g = [torch.randn_like(o) for o in got]
    for a, b in zip(torch.autograd.grad(got, leaves, g), torch.autograd.grad(want, leaves, g)):
        assert torch.equal(a, b)


def test_eager_entry_points_are_the_dispatcher_ops():
    """mhc.pre and mhc.post call the dispatcher ops through mhc._C in eager
    mode (fewer microseconds of host time than torch.ops' boxed call): the
    same results and gradients as torch.ops.mhc.*, seen by dispatch modes;
    a __torch_function__ override (here a mode) gets the torch.ops call,
    and a non-tensor argument torch.ops' message."""
    M, n, C = 5, 4, 8
    t = {k: v.requires_grad_() for k, v in inputs(M, n, C, "cn").items()}
    x_nc = t["x"].transpose(1, 2)  # a non-contiguous [M, n, C] view
    args = (t["x"], t["phi"], t["alpha"], t["beta"], t["weight"], 4, "cn", False, 1e-6, 1e-6, 2.0, "log", 20, 1e-6)
    got = mhc.pre(t["x"], t["phi"], t["alpha"], t["beta"], t["weight"], layout="cn", mode="log")
    want = torch.ops.mhc.pre(*args)
    assert all(torch.equal(a, b) for a, b in zip(got, want))
    g = [torch.randn_like(o) for o in got]
    leaves = [t[k] for k in ("x", "phi", "weight", "alpha", "beta")]
    for a, b in zip(torch.autograd.grad(got, leaves, g), torch.autograd.grad(want, leaves, g)):
        assert torch.equal(a, b)
    out = mhc.post(t["f"], got[1], x_nc, got[2], t["bias"], layout="nc")
    assert torch.equal(out, torch.ops.mhc.expand_combine(t["f"], got[1], x_nc.contiguous(), got[2], t["bias"], 4,
                                                         "nc"))
    with DispatchMode() as d:
        mhc.pre(t["x"], t["phi"], t["alpha"], t["beta"], layout="cn")
        mhc.post(t["f"], got[1], t["x"], got[2], layout="cn")
    # (below autograd: pre_saved, which keeps what the gradient needs)
    assert torch.ops.mhc.pre_saved.default in d.funcs and torch.ops.mhc.expand_combine.default in d.funcs
    with FunctionMode() as f:
        mhc.pre(t["x"], t["phi"], t["alpha"], t["beta"], layout="cn")
        mhc.post(t["f"], got[1], t["x"], got[2], layout="cn")
    assert torch.ops.mhc.pre in f.funcs and torch.ops.mhc.expand_combine in f.funcs
    with pytest.raises((TypeError, RuntimeError), match="phi"):
        mhc.pre(t["x"], [1.0, 2.0], t["alpha"], t["beta"], layout="cn")
    with pytest.raises((TypeError, RuntimeError), match="'P'|argument 'P'|P"):
        mhc.post(t["f"], got[1], t["x"], "P", layout="cn")


def _single_op_calls(layout):
    """(name, the Python API call, the torch.ops call, the tensors to
    differentiate, a call with a non-tensor argument and that argument's name)
    for the four ops that mhc.ops calls through mhc._C in eager mode."""
    M, n, C = 5, 3, 8
    t = {k: v.requires_grad_() for k, v in inputs(M, n, C, layout).items()}
    h = torch.randn(M, 2 * n + n * n, requires_grad=True)
    ms = (torch.rand(M) + 0.5).requires_grad_()
    L = torch.randn(M, n, n, requires_grad=True)
    pre = torch.rand(M, n, requires_grad=True)
    kw = dict(norm_eps=1e-5, pre_eps=1e-6, post_mult=2.0)
    return [
        ("project", lambda: mhc.project(t["x"], t["phi"], t["weight"], layout=layout, tf32=False),
         lambda: torch.ops.mhc.project(t["x"], t["phi"], t["weight"], n, layout, False),
         [t["x"], t["phi"], t["weight"]], lambda: mhc.project(t["x"], "phi", layout=layout), "phi"),
        ("scale", lambda: mhc.scale(h, ms, t["alpha"], t["beta"], **kw),
         lambda: torch.ops.mhc.scale(h, ms, t["alpha"], t["beta"], n, 1e-5, 1e-6, 2.0),
         [h, ms, t["alpha"], t["beta"]], lambda: mhc.scale(h, [1.0] * M, t["alpha"], t["beta"]), "ms"),
        ("sinkhorn", lambda: mhc.sinkhorn(L, mode="log", iters=7, eps=1e-6),
         lambda: torch.ops.mhc.sinkhorn(L, n, "log", 7, 1e-6), [L],
         lambda: mhc.sinkhorn(L, mode=None), "mode"),
        ("aggregate", lambda: mhc.aggregate(t["x"], pre, layout=layout),
         lambda: torch.ops.mhc.aggregate(t["x"], pre, n, layout), [t["x"], pre],
         lambda: mhc.aggregate(t["x"], "pre", layout=layout), "pre"),
    ]


@pytest.mark.parametrize("layout", ["nc", "cn"])
def test_single_op_entry_points_are_the_dispatcher_ops(layout):
    """mhc.project, scale, sinkhorn and aggregate take mhc._C's typed entry
    points in eager mode, as pre and post do: torch.ops' results and
    gradients bit for bit, seen by dispatch modes; a __torch_function__ mode
    gets the torch.ops call; a non-tensor argument an error naming it."""
    for name, api, op, leaves, bad, arg in _single_op_calls(layout):
        got, want = api(), op()
        got, want = (got, want) if isinstance(got, tuple) else ((got,), (want,))
        assert all(a.shape == b.shape and torch.equal(a, b) for a, b in zip(got, want)), name
        g = [torch.randn_like(o) for o in got]
        for a, b in zip(torch.autograd.grad(got, leaves, g), torch.autograd.grad(want, leaves, g)):
            assert torch.equal(a, b), name
        with DispatchMode() as d:
            api()
        assert getattr(torch.ops.mhc, name).default in d.funcs, name
        with FunctionMode() as f:
            api()
        assert getattr(torch.ops.mhc, name) in f.funcs, name
        with pytest.raises((TypeError, RuntimeError, ValueError), match=arg):
            bad()


def test_compile_fullgraph_matches_eager():
    torch._dynamo.reset()
    hc = mhc.HyperConnection(n=4, C=16, mode="log")
    block = torch.nn.Linear(16, 16)
    x = torch.randn(2, 3, 4, 16)

    def model(x):
        return hc(hc(x, block), block)

    eager = model(x)
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")(x)
    assert torch.equal(eager, compiled)
    xs = x.clone().requires_grad_()
    torch.compile(model, fullgraph=True, backend="aot_eager")(xs).sum().backward()
    xe = x.clone().requires_grad_()
    model(xe).sum().backward()
    assert torch.allclose(xs.grad, xe.grad, rtol=1e-5, atol=1e-6)


def test_hyperconnection_init_like_megatron():
    hc = mhc.HyperConnection(n=4, C=32)
    assert hc.phi.shape == (24, 128) and hc.alpha.shape == (3,) and hc.beta.shape == (24,)
    assert torch.all(hc.alpha == 0.01) and torch.all(hc.beta == 0) and torch.all(hc.norm_weight == 1)
    bound = math.sqrt(6.0 / (24 + 128))  # xavier-uniform
    assert hc.phi.abs().max() <= bound and hc.phi.std() > 0.5 * bound / math.sqrt(3)


def test_transformer_engine_aliases():
    s, b, C, n = 3, 2, 8, 4
    x = torch.randn(s, b, C, n)
    phi = torch.randn(24, n * C) / math.sqrt(n * C)
    alpha, beta = torch.rand(3) + 0.5, 0.1 * torch.randn(1, 24)
    H, ms = mhc.mhc_fused_projection(x.view(s * b, C * n), phi)
    h_pre, h_post, h_res = mhc.mhc_fused_scale(H, alpha, beta, ms, n)
    assert h_res.shape == (s * b, n * n)
    P = mhc.mhc_fused_sinkhorn(h_res.view(s, b, n, n), n)
    y = mhc.mhc_fused_aggregate(x, h_pre.view(s, b, n), n)
    out = mhc.mhc_fused_expand_combine(y, None, h_post.view(s, b, n), x, P, n)
    # The same math through the float64 oracle with TE's constants.
    h64, ms64 = ref.project(x.double().reshape(s * b, C, n), phi.double())
    pre64, post64, L64 = ref.scale(h64, ms64, alpha.double(), beta.double().reshape(-1), n,
                                   torch.finfo(torch.float32).eps, 0.0, 2.0)
    P64 = ref.sinkhorn(L64, "log", 20)
    y64 = ref.aggregate(x.double().reshape(s * b, C, n), pre64, "cn")
    out64 = ref.expand_combine(y64, post64, x.double().reshape(s * b, C, n), P64, None, "cn")
    assert rel(out.reshape(s * b, C, n), out64) <= 1e-5
    y2, post2, P2 = mhc.te.mhc_generate_mix_and_aggregate(x, phi, alpha, beta)
    assert torch.allclose(y2, y) and torch.allclose(P2, P)
    with pytest.raises(ValueError, match="fused_grad_x_acc_buffer"):
        mhc.mhc_fused_aggregate(x, h_pre.view(s, b, n), n, fused_grad_x_acc_buffer=torch.zeros(1))


def test_bad_inputs_name_the_argument():
    x = torch.randn(5, 4, 16)
    pre = torch.rand(5, 4)
    with pytest.raises(ValueError, match=r"argument 'x' must be \[M, n, C\]"):
        torch.ops.mhc.aggregate(torch.randn(5, 64), pre, 4, "nc")
    with pytest.raises(ValueError, match=r"argument 'pre' must have shape \[M, n\] = \[5, 4\] \(n = 4\); got shape \[5, 3\]"):
        torch.ops.mhc.aggregate(x, torch.rand(5, 3), 4, "nc")
    with pytest.raises(TypeError, match=r"argument 'pre' must be a float32 tensor; got BFloat16"):
        torch.ops.mhc.aggregate(x, pre.bfloat16(), 4, "nc")
    with pytest.raises(TypeError, match=r"argument 'x' must be a bfloat16, float16 or float32 tensor; got Int"):
        torch.ops.mhc.aggregate(x.int(), pre, 4, "nc")
    with pytest.raises(ValueError, match=r"argument 'x' must have shape \[M, C, n\] = \[M, C, 4\]"):
        torch.ops.mhc.aggregate(x, pre, 4, "cn")
    with pytest.raises(ValueError, match=r"argument 'phi' must have shape \[N, K\] = \[2n \+ n\^2, n\*C\] = \[24, 64\]"):
        torch.ops.mhc.project(x, torch.randn(20, 64), None, 4, "nc", False)
    with pytest.raises(TypeError, match=r"argument 'f' must have the dtype of 'x'"):
        torch.ops.mhc.expand_combine(torch.randn(5, 16).half(), pre, x, torch.rand(5, 4, 4), None, 4, "nc")
    with pytest.raises(ValueError, match=r"layout must be 'nc' or 'cn'"):
        torch.ops.mhc.aggregate(x, pre, 4, "nhc")
    with pytest.raises(ValueError, match=r"mode must be 'log' or 'softmax_eps'"):
        torch.ops.mhc.sinkhorn(torch.randn(5, 4, 4), 4, "exact", 20, 0.0)
    with pytest.raises(ValueError, match=r"iters must be >= 1"):
        torch.ops.mhc.sinkhorn(torch.randn(5, 4, 4), 4, "log", 0, 0.0)
    with pytest.raises(ValueError, match=r"argument 'x' must be a tensor \[\.\.\., n, C\]"):
        mhc.aggregate(torch.randn(16), pre)
    with pytest.raises(ValueError, match=r"argument 'phi' must have shape \[N, K\] = \[2n \+ n\^2, n\*C\] = \[24, 64\]"):
        mhc.pre(x, torch.randn(20, 64), torch.rand(3), torch.rand(24))
    with pytest.raises(ValueError, match="not 2n \\+ n\\^2"):
        mhc.scale(torch.randn(5, 23), torch.rand(5), torch.rand(3), torch.rand(23))


def test_leading_dims_and_empty_tokens():
    x = torch.randn(2, 3, 4, 16)  # (s, b, n, C)
    y = mhc.aggregate(x, torch.rand(2, 3, 4))
    assert y.shape == (2, 3, 16)
    empty = torch.randn(0, 4, 16)
    gx, gphi, gw = torch.ops.mhc.project_backward(torch.randn(0, 24), torch.randn(0), empty, torch.randn(24, 64),
                                                  torch.ones(64), 4, "nc", False)
    assert gx.shape == empty.shape and torch.all(gphi == 0) and torch.all(gw == 0)
