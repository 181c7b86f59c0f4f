"""The layer seam (docs/design/seam.md) on the CPU reference path:
torch.ops.mhc.post_pre / post_pre_saved / post_pre_backward and mhc.post_pre
against float64 SPEC.md (python/mhc/reference.py) and against the unfused
per-op path, opcheck, torch.compile, errors, mhc.HyperConnectionStack (fused
against unfused, and a short AdamW run against pure PyTorch) and what the
seam's autograd node keeps for the backward."""

import math

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

import mhc
from dispatch_modes import DispatchMode, FunctionMode
from mhc import reference as ref

torch.manual_seed(0)  # reproducible failures; every test draws fresh data

OPTS = dict(norm_eps=1e-6, pre_eps=1e-6, post_mult=2.0)


def rel(a, b):
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm().clamp_min(1e-300)).item()


def seam_inputs(M, n, C, layout, bias=True, weight=True, dtype=torch.float32):
    """One seam's inputs in MATH.md's ranges: layer l's f, post, x, P, bias
    and layer l+1's phi, alpha, beta, weight (None where absent)."""
    N, K = 2 * n + n * n, n * C
    x = torch.randn(M, n, C) if layout == "nc" else torch.randn(M, C, n)
    t = dict(f=torch.randn(M, C), post=2 * torch.sigmoid(torch.randn(M, n)), x=x,
             P=torch.softmax(torch.randn(M, n, n), -2), bias=0.5 * torch.randn(C) if bias else None,
             phi=torch.randn(N, K) / math.sqrt(K), alpha=torch.rand(3) + 0.5, beta=0.5 * torch.randn(N),
             weight=1 + 0.1 * torch.randn(K) if weight else None)
    return {k: None if v is None else v.to(dtype) for k, v in t.items()}


def seam64(t, n, layout, mode, iters, eps):
    """float64 SPEC.md of the seam: post of layer l, then pre of layer l+1."""
    x_next = ref.expand_combine(t["f"], t["post"], t["x"], t["P"], t["bias"], layout)
    h, ms = ref.project(x_next, t["phi"], t["weight"])
    pre, post_next, L = ref.scale(h, ms, t["alpha"], t["beta"], n, **OPTS)
    return x_next, ref.aggregate(x_next, pre, layout), post_next, ref.sinkhorn(L, mode, iters, eps)


def call(t, layout, mode, iters, eps):
    return mhc.post_pre(t["f"], t["post"], t["x"], t["P"], t["phi"], t["alpha"], t["beta"], t["weight"], t["bias"],
                        layout=layout, mode=mode, iters=iters, eps=eps, **OPTS)


def leaves_of(t):
    return {k: v for k, v in t.items() if v is not None}


# n 1..8, both layouts, odd M including 1, every bias/weight combination, both Sinkhorn modes.
CASES = [(n, layout, (1, 3, 7, 5)[(n + (layout == "cn")) % 4], n % 2 == 0, n % 4 < 2,
          ("softmax_eps", "log")[(n + (layout == "cn")) % 2])
         for n in range(1, 9) for layout in ("nc", "cn")]


def _ids(c):
    return "n{}-{}-M{}-bias{:d}-w{:d}-{}".format(*c)


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_forward_and_gradients_match_float64(case):
    """Every result and every input's gradient of mhc.post_pre in float32
    within SPEC.md's 1e-5 of float64 SPEC.md on the same inputs, and the
    float64 run (the same ops) within 1e-10 of it: the chain's formulas,
    not only its rounding."""
    n, layout, M, bias, weight, mode = case
    C, iters, eps = 12, 6, 1e-6
    t32 = seam_inputs(M, n, C, layout, bias, weight)
    t64 = {k: None if v is None else v.double() for k, v in t32.items()}
    l64 = {k: v.requires_grad_() for k, v in leaves_of(t64).items()}
    want = seam64(t64, n, layout, mode, iters, eps)
    gouts = [torch.randn_like(o) for o in want]
    want_g = torch.autograd.grad(want, list(l64.values()), gouts)
    for t, bound in ((t32, 1e-5), ({k: None if v is None else v.detach().clone() for k, v in t64.items()}, 1e-10)):
        leaves = {k: v.requires_grad_() for k, v in leaves_of(t).items()}
        got = call(t, layout, mode, iters, eps)
        for name, a, b in zip(("x_next", "y", "post_next", "P_next"), got, want):
            assert a.shape == b.shape and a.dtype == t["x"].dtype
            assert rel(a, b) <= bound, (name, rel(a, b))
        got_g = torch.autograd.grad(got, list(leaves.values()), [g.to(t["x"].dtype) for g in gouts])
        for name, a, b in zip(leaves, got_g, want_g):
            assert a.shape == b.shape and rel(a, b) <= bound, (name, rel(a, b), bound)


@pytest.mark.parametrize("layout", ["nc", "cn"])
@pytest.mark.parametrize("bias,weight", [(True, True), (False, False)])
def test_seam_is_post_then_pre(layout, bias, weight):
    """mhc.post_pre against mhc.post then mhc.pre (the unfused ops, each its
    own autograd node): the same forward bits; the parameters' gradients
    bit for bit (the same backward ops on the same values); the x path's
    within a few float32 roundings (x_next's three contributions summed in
    another order: autograd adds the pre node's sum to gx_next)."""
    M, n, C = 7, 4, 16
    t = seam_inputs(M, n, C, layout, bias, weight)
    leaves = {k: v.requires_grad_() for k, v in leaves_of(t).items()}
    kw = dict(layout=layout, mode="softmax_eps", iters=7, eps=1e-6, **OPTS)
    fused = call(t, layout, "softmax_eps", 7, 1e-6)
    x_next = mhc.post(t["f"], t["post"], t["x"], t["P"], t["bias"], layout=layout)
    unfused = (x_next, *mhc.pre(x_next, t["phi"], t["alpha"], t["beta"], t["weight"], **kw))
    for a, b in zip(fused, unfused):
        assert torch.equal(a, b)
    g = [torch.randn_like(o) for o in fused]
    wrt = list(leaves.values())
    for name, a, b in zip(leaves, torch.autograd.grad(fused, wrt, g), torch.autograd.grad(unfused, wrt, g)):
        if name in ("phi", "alpha", "beta", "weight"):
            assert torch.equal(a, b), name
        else:
            assert rel(a, b) <= 1e-6, (name, rel(a, b))


def test_mixed_parameter_dtypes():
    """bf16 alpha, beta and bias with float32 phi and weight (accepted, as
    mhc.pre accepts them): mhc.post then mhc.pre's bits."""
    t = seam_inputs(5, 3, 8, "nc")
    t.update(alpha=t["alpha"].bfloat16(), beta=t["beta"].bfloat16(), bias=t["bias"].bfloat16())
    got = call(t, "nc", "log", 4, 0.0)
    x_next = mhc.post(t["f"], t["post"], t["x"], t["P"], t["bias"])
    want = (x_next, *mhc.pre(x_next, t["phi"], t["alpha"], t["beta"], t["weight"], mode="log", iters=4, eps=0.0,
                             **OPTS))
    assert all(torch.equal(a, b) for a, b in zip(got, want))


def test_saved_op_and_backward_op_are_the_contract():
    """post_pre_saved's eight results in the contract's order (x_next, h, ms,
    pre, post_next, logits, P_next, y), post_pre's four of them, and
    post_pre_backward's nine gradients: those of the separate ops' chain of
    docs/design/seam.md, with empty gbias / gweight where bias / weight is
    absent."""
    M, n, C, layout = 5, 3, 8, "cn"
    t = seam_inputs(M, n, C, layout, bias=False, weight=False)
    attrs = (n, layout, False, 1e-6, 1e-6, 2.0, "log", 5, 0.0)
    args = (t["f"], t["post"], t["x"], t["P"], None, t["phi"], t["alpha"], t["beta"], None)
    saved = torch.ops.mhc.post_pre_saved(*args, *attrs)
    x_next = torch.ops.mhc.expand_combine(t["f"], t["post"], t["x"], t["P"], None, n, layout)
    y, post_next, P_next, h, ms, pre, logits = torch.ops.mhc.pre_saved(x_next, t["phi"], t["alpha"], t["beta"], None,
                                                                       *attrs)
    for a, b in zip(saved, (x_next, h, ms, pre, post_next, logits, P_next, y)):
        assert torch.equal(a, b)
    for a, b in zip(torch.ops.mhc.post_pre(*args, *attrs), (x_next, y, post_next, P_next)):
        assert torch.equal(a, b)
    gx_next, gy = torch.randn_like(x_next), torch.randn_like(y)
    gpost_next, gP_next = torch.randn_like(post_next), torch.randn_like(P_next)
    grads = torch.ops.mhc.post_pre_backward(gx_next, gy, gpost_next, gP_next, t["f"], t["post"], t["x"], t["P"], None,
                                            x_next, h, ms, pre, logits, t["phi"], t["alpha"], t["beta"], None, *attrs)
    g1, gpre = torch.ops.mhc.aggregate_backward(gy, x_next, pre, n, layout, acc=gx_next)
    glogits = torch.ops.mhc.sinkhorn_backward(gP_next, logits, n, "log", 5, 0.0)
    gh, gms, galpha, gbeta = torch.ops.mhc.scale_backward(gpre, gpost_next, glogits, h, ms, t["alpha"], t["beta"], n,
                                                          1e-6, 1e-6, 2.0)
    g, gphi, gw = torch.ops.mhc.project_backward(gh, gms, x_next, t["phi"], None, n, layout, False, acc=g1)
    assert torch.equal(g, (gx_next + torch.ops.mhc.aggregate_backward(gy, x_next, pre, n, layout)[0])
                       + torch.ops.mhc.project_backward(gh, gms, x_next, t["phi"], None, n, layout, False)[0])
    gf, gpost, gx, gP, gbias = torch.ops.mhc.expand_combine_backward(g, t["f"], t["post"], t["x"], t["P"], None, n,
                                                                     layout)
    for a, b in zip(grads, (gx, gf, gpost, gP, gbias, gphi, galpha, gbeta, gw)):
        assert a.shape == b.shape and torch.equal(a, b)
    assert grads[4].shape == (0,) and grads[8].shape == (0,)


def test_leading_dims_and_empty_tokens():
    """x [s, b, n, C]: results with the same leading dims; M = 0: empty
    results, zero parameter gradients."""
    n, C = 3, 8
    t = seam_inputs(6, n, C, "nc")
    lead = {k: v.reshape(2, 3, *v.shape[1:]) if k in ("f", "post", "x", "P") else v for k, v in t.items()}
    got = call(lead, "nc", "log", 4, 0.0)
    want = call(t, "nc", "log", 4, 0.0)
    assert [tuple(o.shape) for o in got] == [(2, 3, n, C), (2, 3, C), (2, 3, n), (2, 3, n, n)]
    for a, b in zip(got, want):
        assert torch.equal(a.reshape(b.shape), b)
    empty = {k: v if k not in ("f", "post", "x", "P") else v[:0] for k, v in t.items()}
    leaves = {k: v.requires_grad_() for k, v in leaves_of(empty).items()}
    out = call(empty, "nc", "log", 4, 0.0)
    assert [o.shape[0] for o in out] == [0, 0, 0, 0]
    grads = torch.autograd.grad(sum(o.sum() for o in out), list(leaves.values()))
    for name, g in zip(leaves, grads):
        assert g.shape == leaves[name].shape
        if name in ("bias", "phi", "alpha", "beta", "weight"):
            assert torch.equal(g, torch.zeros_like(g)), name


def test_eager_entry_point_is_the_dispatcher_op():
    """In eager mode mhc.post_pre calls mhc._C's typed entry point: torch.ops'
    results and gradients bit for bit, seen by dispatch modes (below
    autograd: post_pre_saved); a __torch_function__ mode gets the torch.ops
    call; a non-tensor argument an error naming it."""
    M, n, C = 5, 3, 8
    t = seam_inputs(M, n, C, "cn")
    leaves = {k: v.requires_grad_() for k, v in leaves_of(t).items()}
    got = call(t, "cn", "log", 5, 0.0)
    want = torch.ops.mhc.post_pre(*(t[k] for k in ("f", "post", "x", "P", "bias", "phi", "alpha", "beta", "weight")),
                                  n, "cn", False, 1e-6, 1e-6, 2.0, "log", 5, 0.0)
    assert all(torch.equal(a, b) for a, b in zip(got, want))
    g = [torch.randn_like(o) for o in got]
    wrt = list(leaves.values())
    for a, b in zip(torch.autograd.grad(got, wrt, g), torch.autograd.grad(want, wrt, g)):
        assert torch.equal(a, b)
    with DispatchMode() as d:
        call(t, "cn", "log", 5, 0.0)
    assert torch.ops.mhc.post_pre_saved.default in d.funcs
    with FunctionMode() as f:
        call(t, "cn", "log", 5, 0.0)
    assert torch.ops.mhc.post_pre in f.funcs
    with pytest.raises((TypeError, RuntimeError), match="phi"):
        mhc.post_pre(t["f"], t["post"], t["x"], t["P"], "phi", t["alpha"], t["beta"], layout="cn")


# --- opcheck and torch.compile ---------------------------------------------------

ACT = (torch.bfloat16, torch.float16, torch.float32)
PARAM = (torch.float32, torch.bfloat16)


def _op_args(op, act, param, bias, weight, M=3, n=2, C=8, layout="nc"):
    t = seam_inputs(M, n, C, layout, bias, weight)
    t = {k: None if v is None else v.to(act if k in ("f", "x") else param if k in (
        "bias", "phi", "alpha", "beta", "weight") else torch.float32 if act != torch.float64 else act)
         for k, v in t.items()}
    attrs = (n, layout, False, 1e-6, 1e-6, 2.0, "softmax_eps", 3, 1e-6)
    fwd = (t["f"], t["post"], t["x"], t["P"], t["bias"], t["phi"], t["alpha"], t["beta"], t["weight"], *attrs)
    if op != "post_pre_backward":
        return fwd
    x_next, h, ms, pre, post_next, logits, P_next, y = torch.ops.mhc.post_pre_saved(*fwd)
    return (torch.randn_like(x_next), torch.randn_like(y), torch.randn_like(post_next), torch.randn_like(P_next),
            *fwd[:4], t["bias"], x_next, h, ms, pre, logits, t["phi"], t["alpha"], t["beta"], t["weight"], *attrs)


DTYPES = [(a, p, b, w) for a in ACT for p in PARAM for (b, w) in ((True, True), (False, False))] + [
    (torch.float64, torch.float64, True, False), (torch.float64, torch.float64, False, True)]


@pytest.mark.parametrize("op", ["post_pre", "post_pre_saved", "post_pre_backward"])
@pytest.mark.parametrize("dtypes", DTYPES, ids=lambda d: "-".join(str(v).replace("torch.", "") for v in d))
def test_opcheck(op, dtypes):
    """Schema, autograd registration and the fake kernel against the real op
    (and AOT dispatch for float64 and for bfloat16 activations and
    parameters); the forward ops' inputs require grad, the backward's not
    (it refuses double backward)."""
    act, param, bias, weight = dtypes
    grad = op != "post_pre_backward"
    args = tuple(a.requires_grad_(grad) if isinstance(a, torch.Tensor) else a
                 for a in _op_args(op, act, param, bias, weight))
    utils = ["test_schema", "test_autograd_registration", "test_faketensor"]
    if act in (torch.float64, torch.bfloat16) and param in (torch.float64, torch.bfloat16):
        utils.append("test_aot_dispatch_dynamic")
    torch.library.opcheck(getattr(torch.ops.mhc, op), args, test_utils=utils)


@pytest.mark.parametrize("op", ["post_pre", "post_pre_saved", "post_pre_backward"])
def test_fake_kernel_on_meta_tensors(op):
    """On meta tensors each op gives the real op's shapes, dtypes, strides."""
    for dtypes in DTYPES:
        args = _op_args(op, *dtypes, layout="cn")
        real = getattr(torch.ops.mhc, op)(*args)
        meta = getattr(torch.ops.mhc, op)(*(a.to("meta") if isinstance(a, torch.Tensor) else a for a in args))
        assert len(real) == len(meta)
        for r, m in zip(real, meta):
            assert m.device.type == "meta" and (m.shape, m.dtype, m.stride()) == (r.shape, r.dtype, r.stride())


def test_argument_rules_name_the_schemas_tensors():
    """Every tensor argument of the three schemas has a rule (OpContract),
    in the contract's order."""
    want = {"post_pre": ["f", "post", "x", "P", "bias", "phi", "alpha", "beta", "weight"],
            "post_pre_backward": ["gx_next", "gy", "gpost_next", "gP_next", "f", "post", "x", "P", "bias", "x_next",
                                  "h", "ms", "pre", "logits", "phi", "alpha", "beta", "weight"]}
    want["post_pre_saved"] = want["post_pre"]
    for op, names in want.items():
        schema = getattr(torch.ops.mhc, op).default._schema
        assert [a.name for a in schema.arguments if "Tensor" in str(a.type)] == names
        assert mhc._C.arg_names(op) == names


def _stack(fused, L=3, n=4, C=16, **kw):
    torch.manual_seed(3)
    blocks = [nn.Sequential(nn.Linear(C, C), nn.GELU()) for _ in range(L)]
    stack = mhc.HyperConnectionStack(blocks, n, C, fused=fused, **kw)
    with torch.no_grad():
        for layer in stack.layers:
            layer.alpha.copy_(torch.rand(3) + 0.5)
            layer.beta.normal_(0, 0.5)
            if layer.bias is not None:
                layer.bias.normal_(0, 0.5)
    return stack


@pytest.mark.parametrize("backend,dtype,tol", [("aot_eager", torch.float32, 1e-6), ("inductor", torch.float64, 1e-12)])
def test_compile_fullgraph_of_a_stack(backend, dtype, tol):
    """torch.compile(fullgraph=True) of a fused stack: the forward and every
    gradient as eager gives them (Inductor's own kernels for the blocks sum
    in their own order: compared in float64, as test_opcheck.py does)."""
    torch._dynamo.reset()
    stack = _stack(True, bias=True, mode="log", layout="cn").to(dtype)
    x = torch.randn(2, 3, 16, 4, dtype=dtype)
    xe, xc = x.clone().requires_grad_(), x.clone().requires_grad_()
    eager = stack(xe)
    eager.square().sum().backward()
    ge = [p.grad.clone() for p in stack.parameters()]
    stack.zero_grad()
    compiled = torch.compile(stack, fullgraph=True, backend=backend)(xc)
    compiled.square().sum().backward()
    torch.testing.assert_close(compiled, eager, rtol=10 * tol, atol=tol)
    torch.testing.assert_close(xc.grad, xe.grad, rtol=10 * tol, atol=tol)
    for a, b in zip((p.grad for p in stack.parameters()), ge):
        torch.testing.assert_close(a, b, rtol=10 * tol, atol=tol)


# --- errors ------------------------------------------------------------------------

def test_bad_inputs_name_the_argument():
    M, n, C = 5, 4, 16
    t = seam_inputs(M, n, C, "nc")
    attrs = (n, "nc", False, 1e-6, 1e-6, 2.0, "log", 3, 0.0)

    def op(**change):
        a = {**t, **change}
        return torch.ops.mhc.post_pre(a["f"], a["post"], a["x"], a["P"], a["bias"], a["phi"], a["alpha"], a["beta"],
                                      a["weight"], *attrs)

    with pytest.raises(ValueError, match=r"mhc.post_pre: argument 'post' must have shape \[M, n\] = \[5, 4\] "
                                         r"\(n = 4\); got shape \[5, 3\]"):
        op(post=torch.rand(M, 3))
    with pytest.raises(ValueError, match=r"mhc.post_pre: argument 'x' must have shape \[M, n, C\] = \[5, 4, 16\]"):
        op(x=torch.randn(M, 4, 8))
    with pytest.raises(TypeError, match=r"mhc.post_pre: argument 'x' must have the dtype of 'f'"):
        op(x=t["x"].bfloat16())
    with pytest.raises(ValueError, match=r"mhc.post_pre: argument 'phi' must have shape \[N, K\] = "
                                         r"\[2n \+ n\^2, n\*C\] = \[24, 64\]"):
        op(phi=torch.randn(24, 60))
    with pytest.raises(ValueError, match=r"mhc.post_pre: argument 'bias' must have shape \[C\] = \[16\]"):
        op(bias=torch.randn(15))
    with pytest.raises(TypeError, match=r"mhc.post_pre: argument 'P' must be a float32 tensor; got BFloat16"):
        op(P=t["P"].bfloat16())
    with pytest.raises(TypeError, match=r"mhc.post_pre: argument 'weight' must have the dtype of 'phi'"):
        op(weight=t["weight"].bfloat16())
    with pytest.raises(TypeError, match=r"mhc.post_pre: argument 'alpha' must be a tensor; got None"):
        op(alpha=None)
    with pytest.raises(ValueError, match=r"mhc.post_pre: argument 'alpha' is on meta but the other tensors are on "
                                         r"cpu"):
        op(alpha=t["alpha"].to("meta"))
    with pytest.raises(ValueError, match=r"mhc.post_pre: mode must be 'log' or 'softmax_eps'"):
        torch.ops.mhc.post_pre(*(t[k] for k in ("f", "post", "x", "P", "bias", "phi", "alpha", "beta", "weight")),
                               *attrs[:6], "exact", 3, 0.0)
    x_next, h, ms, pre, post_next, logits, P_next, y = torch.ops.mhc.post_pre_saved(
        *(t[k] for k in ("f", "post", "x", "P", "bias", "phi", "alpha", "beta", "weight")), *attrs)
    with pytest.raises(ValueError, match=r"mhc.post_pre_backward: argument 'gy' must have shape \[M, C\] = "
                                         r"\[5, 16\]"):
        torch.ops.mhc.post_pre_backward(x_next, torch.randn(M, 8), post_next, P_next, t["f"], t["post"], t["x"],
                                        t["P"], t["bias"], x_next, h, ms, pre, logits, t["phi"], t["alpha"],
                                        t["beta"], t["weight"], *attrs)
    with pytest.raises(ValueError, match=r"argument 'x' must be a tensor \[\.\.\., n, C\]"):
        mhc.post_pre(t["f"], t["post"], t["x"].reshape(M, -1), t["P"], t["phi"], t["alpha"], t["beta"])


def test_module_errors_name_the_argument():
    a, b = mhc.HyperConnection(4, 16), mhc.HyperConnection(2, 16)
    y, state = a.pre(torch.randn(3, 4, 16))
    with pytest.raises(ValueError, match=r"argument 'next_layer' must have this layer's n, C and layout \(n=4, C=16, "
                                         r"layout='nc'\); got n=2, C=16, layout='nc'"):
        a.post_pre(y, state, b)
    with pytest.raises(TypeError, match=r"argument 'next_layer' must be a HyperConnection; got Linear"):
        a.post_pre(y, state, nn.Linear(16, 16))
    with pytest.raises(TypeError, match=r"argument 'blocks' must hold nn.Modules; block 1 is a builtin_function"):
        mhc.HyperConnectionStack([nn.Identity(), torch.tanh], 4, 16)
    with pytest.raises(ValueError, match=r"argument 'blocks' must hold at least one block"):
        mhc.HyperConnectionStack([], 4, 16)


def test_double_backward_raises():
    """First-order gradients with create_graph=True equal the plain ones;
    differentiating them raises the ops' clear error."""
    t = seam_inputs(3, 2, 4, "nc")
    t = {k: None if v is None else v.double() for k, v in t.items()}
    leaves = {k: v.requires_grad_() for k, v in leaves_of(t).items()}
    out = call(t, "nc", "log", 3, 0.0)
    g = [torch.randn_like(o) for o in out]
    first = torch.autograd.grad(out, list(leaves.values()), g)
    graph = torch.autograd.grad(call(t, "nc", "log", 3, 0.0), list(leaves.values()), g, create_graph=True)
    for a, b in zip(graph, first):
        assert torch.equal(a, b)
    with pytest.raises(RuntimeError, match=r"mhc: double backward \(second-order gradients\) is not supported by "
                                           r"mhc\.post_pre \(mhc\.post_pre_backward has no gradient\)"):
        torch.autograd.grad(sum(v.sum() for v in graph), list(leaves.values()), allow_unused=True)


def test_gradcheck_float64():
    """Finite differences through the seam's node (float64)."""
    t = {k: None if v is None else v.double() for k, v in seam_inputs(3, 3, 4, "cn").items()}
    names = [k for k, v in t.items() if v is not None]

    def seam(*leaves):
        a = {**t, **dict(zip(names, leaves))}
        return call(a, "cn", "softmax_eps", 4, 1e-6)

    assert torch.autograd.gradcheck(seam, [t[k].requires_grad_() for k in names], eps=1e-6, atol=1e-6, rtol=1e-5)


# --- the stack -----------------------------------------------------------------------

@pytest.mark.parametrize("layout", ["nc", "cn"])
def test_stack_fused_is_the_unfused_stack(layout):
    """HyperConnectionStack: the fused forward bit for bit the per-layer
    one (the same ops on the same values), its gradients within a few float32
    roundings (x's contributions summed in another order); a user's own loop
    over stack.layers with HyperConnection.post_pre is the fused stack."""
    fused, unfused = _stack(True, layout=layout, bias=True), _stack(False, layout=layout, bias=True)
    unfused.load_state_dict(fused.state_dict())
    assert len(fused.layers) == len(fused.blocks) == 3 and fused.layers[1].phi.shape == (24, 64)
    x = torch.randn(5, 4, 16) if layout == "nc" else torch.randn(5, 16, 4)
    outs, grads = [], []
    for stack in (fused, unfused):
        xs = x.clone().requires_grad_()
        out = stack(xs)
        out.square().sum().backward()
        outs.append(out)
        grads.append([xs.grad] + [p.grad for p in stack.parameters()])
    assert torch.equal(outs[0], outs[1])
    for a, b in zip(*grads):
        assert rel(a, b) <= 1e-6
    layers, blocks = fused.layers, fused.blocks
    y, state = layers[0].pre(x)
    for l in range(len(layers) - 1):
        y, state = layers[l].post_pre(blocks[l](y), state, layers[l + 1])
    assert torch.equal(layers[-1].post(blocks[-1](y), state), outs[0])


class PureStack(nn.Module):
    """The same stack in plain PyTorch: SPEC.md's formulas (python/mhc/reference.py) under autograd."""

    def __init__(self, stack):
        super().__init__()
        self.blocks = stack.blocks
        self.params = nn.ParameterList(p for layer in stack.layers for p in
                                       (layer.phi, layer.alpha, layer.beta, layer.norm_weight, layer.bias))
        self.n = stack.layers[0].n

    def forward(self, x):
        for l, block in enumerate(self.blocks):
            phi, alpha, beta, w, bias = self.params[5 * l:5 * l + 5]
            h, ms = ref.project(x, phi, w)
            pre, post, L = ref.scale(h, ms, alpha, beta, self.n, **OPTS)
            P = ref.sinkhorn(L, "softmax_eps", 20, 1e-6)
            x = ref.expand_combine(block(ref.aggregate(x, pre)), post, x, P, bias)
        return x


def test_training_run_matches_pure_pytorch():
    """Three layers, AdamW, five steps: HyperConnectionStack (fused seams)
    and the same math in plain PyTorch from the same initial parameters
    give the same losses and parameters within SPEC.md's float32 bound."""
    fused = _stack(True, L=3, bias=True)
    twin = _stack(True, L=3, bias=True)
    twin.load_state_dict(fused.state_dict())
    pure = PureStack(twin)
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=0.01) for m in (fused, pure)]
    gen = torch.Generator().manual_seed(5)
    for step in range(5):
        x = torch.randn(9, 4, 16, generator=gen)
        target = torch.randn(9, 4, 16, generator=gen)
        losses = []
        for model, opt in zip((fused, pure), opts):
            opt.zero_grad()
            loss = (model(x) - target).square().mean()
            loss.backward()
            opt.step()
            losses.append(loss.detach())
        assert rel(losses[0], losses[1]) <= 1e-5, (step, losses)
    for a, b in zip(fused.parameters(), twin.parameters()):
        assert rel(a, b) <= 1e-5
    assert rel(fused.layers[0].phi, _stack(True, L=3, bias=True).layers[0].phi) > 1e-4  # it trained


# --- what the backward keeps ---------------------------------------------------------

class Double(nn.Module):
    """A block that keeps nothing for its backward (f = 2 y)."""

    def forward(self, y):
        return y * 2.0


def saved_storages(fn):
    """Runs fn() with saved-tensor hooks: (result, {storage pointer: (shape, bytes)}) of what autograd keeps."""
    kept = {}

    def pack(t):
        s = t.untyped_storage()
        kept.setdefault(s.data_ptr(), (tuple(t.shape), s.nbytes()))
        return t.detach()  # (t itself, a saved output, would leak its graph: pytorch/pytorch#115255)

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return out, kept


@pytest.mark.parametrize("layout", ["nc", "cn"])
def test_each_x_is_saved_once_per_layer(layout):
    """A fused stack of L layers keeps L n-stream tensors (x_0 .. x_{L-1},
    each once: seam l's x_next is seam l+1's x) and no block input y; the
    unfused stack keeps no less."""
    L, n, C, M = 4, 4, 16, 5
    x = torch.randn(M, n, C) if layout == "nc" else torch.randn(M, C, n)
    totals = {}
    for fused in (True, False):
        stack = mhc.HyperConnectionStack([Double() for _ in range(L)], n, C, fused=fused, layout=layout, bias=True)
        ys = []
        for block in stack.blocks:
            block.register_forward_hook(lambda mod, inp, out: ys.append(inp[0]))
        out, kept = saved_storages(lambda: stack(x))
        streams = [k for k, (shape, _) in kept.items() if shape == tuple(x.shape)]
        assert len(streams) == L, (fused, len(streams))
        assert not {y.untyped_storage().data_ptr() for y in ys} & set(kept), "a block input y is kept"
        totals[fused] = sum(b for _, b in kept.values())
        out.sum().backward()
    assert totals[True] <= totals[False], totals


class _Adds(TorchDispatchMode):
    """Counts the element-wise adds whose result has `shape` (an n-stream tensor's)."""

    def __init__(self, shape):
        super().__init__()
        self.shape, self.count = shape, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func in (torch.ops.aten.add.Tensor, torch.ops.aten.add_.Tensor) and tuple(out.shape) == self.shape:
            self.count += 1
        return out


def _backward_adds(fn, shape):
    out = fn()
    with _Adds(shape) as adds:
        sum(o.sum() for o in (out if isinstance(out, tuple) else (out,))).backward()
    return adds.count


def test_seams_add_no_n_stream_tensors_in_the_backward():
    """The backward of a fused stack adds no n-stream tensors but those of
    the first layer's pre step (as mhc.pre alone does, if any): the seams
    sum x's contributions inside their backward ops (acc), and autograd has
    nothing to sum (each x_l has one user). In the unfused stack autograd
    adds each x_l's two users' gradients (l >= 1)."""
    L, n, C, M = 3, 4, 16, 5
    x = torch.randn(M, n, C)
    hc = mhc.HyperConnection(n, C)
    pre_adds = _backward_adds(lambda: hc.pre(x)[0], x.shape)
    counts = {}
    for fused in (True, False):
        stack = mhc.HyperConnectionStack([Double() for _ in range(L)], n, C, fused=fused, bias=True)
        counts[fused] = _backward_adds(lambda: stack(x), x.shape)
    assert counts[True] == pre_adds and counts[False] >= counts[True] + L - 1, (counts, pre_adds)


def test_pre_keeps_no_y():
    """mhc.pre's node keeps x and its mixing values, not y (nor post)."""
    t = seam_inputs(5, 4, 16, "nc")
    x = t["x"].requires_grad_()
    (y, post, P), kept = saved_storages(lambda: mhc.pre(x, t["phi"], t["alpha"], t["beta"], t["weight"]))
    assert y.untyped_storage().data_ptr() not in kept and post.untyped_storage().data_ptr() not in kept
    assert x.untyped_storage().data_ptr() in kept
    gx, = torch.autograd.grad(y.sum(), x)  # post's and P's gradients missing: zeros
    assert gx.shape == x.shape
