"""The fake kernels against the real ops (CPU): torch.library.opcheck of every
op, forward and backward, for every dtype combination the ops accept, and
torch.compile with Inductor (fullgraph) per op against eager and against
float64 MATH.md (python/mhc/reference.py)."""

import math

import pytest
import torch

import mhc
from mhc import reference as ref

ACT = (torch.bfloat16, torch.float16, torch.float32)  # activations (x, f, y, out)
PARAM = (torch.float32, torch.bfloat16)  # parameters (phi, weight; alpha, beta; bias)
F64 = torch.float64  # float64: every tensor of a call


def _dtypes(op):
    """Every dtype assignment `op` accepts, as dicts of act (x, f and their
    grads), mix (h, ms, pre, post, logits, P and their grads), proj (phi,
    weight), scale (alpha, beta), bias (None: absent) and weight (whether
    present)."""
    f64 = dict(act=F64, mix=F64, proj=F64, scale=F64, bias=F64, weight=True)
    base = dict(act=torch.float32, mix=torch.float32, proj=torch.float32, scale=torch.float32, bias=None,
                weight=True)
    name = op.replace("_backward", "").replace("_saved", "").replace("_into", "")
    if name == "project":
        cases = [dict(base, act=a, proj=p, weight=w) for a in ACT for p in PARAM for w in (True, False)]
        return cases + [f64, dict(f64, weight=False)]
    if name == "scale":
        return [dict(base, scale=p) for p in PARAM] + [f64]
    if name == "sinkhorn":
        return [base, f64]
    if name == "aggregate":
        return [dict(base, act=a) for a in ACT] + [f64]
    if name == "expand_combine":
        return [dict(base, act=a, bias=b) for a in ACT for b in PARAM + (None,)] + [f64, dict(f64, bias=None)]
    assert name == "pre"
    return [dict(base, act=a, proj=p, scale=s) for a in ACT for p in PARAM for s in PARAM] + [f64]


def _args(op, d, M=3, n=2, C=8, layout="nc"):
    """Inputs of torch.ops.mhc.<op> with the dtypes of `d` (MATH.md's ranges)."""
    N, K = 2 * n + n * n, n * C
    act, mix = (lambda t: t.to(d["act"])), (lambda t: t.to(d["mix"]))
    x = act(torch.randn(M, n, C) if layout == "nc" else torch.randn(M, C, n))
    phi = (torch.randn(N, K) / math.sqrt(K)).to(d["proj"])
    weight = (1 + 0.1 * torch.randn(K)).to(d["proj"]) if d["weight"] else None
    alpha, beta = (torch.rand(3) + 0.5).to(d["scale"]), (0.5 * torch.randn(N)).to(d["scale"])
    bias = None if d["bias"] is None else (0.5 * torch.randn(C)).to(d["bias"])
    f = act(torch.randn(M, C))
    h, ms = mix(torch.randn(M, N)), mix(torch.rand(M) + 0.5)
    pre, post = mix(torch.rand(M, n) + 0.1), mix(2 * torch.rand(M, n))
    L, P = mix(torch.randn(M, n, n)), mix(torch.softmax(torch.randn(M, n, n), -2))
    eps = (1e-6, 1e-6, 2.0)
    sink = ("softmax_eps", 3, 1e-6)
    return {
        "project": (x, phi, weight, n, layout, False),
        "project_backward": (h, ms, x, phi, weight, n, layout, False),
        "scale": (h, ms, alpha, beta, n, *eps),
        "scale_backward": (pre, post, L, h, ms, alpha, beta, n, *eps),
        "sinkhorn": (L, n, *sink),
        "sinkhorn_backward": (L.clone(), L, n, *sink),
        "aggregate": (x, pre, n, layout),
        "aggregate_backward": (f, x, pre, n, layout),
        "expand_combine": (f, post, x, P, bias, n, layout),
        "expand_combine_backward": (act(torch.randn_like(x, dtype=torch.float32)), f, post, x, P, bias, n, layout),
        "pre": (x, phi, alpha, beta, weight, n, layout, False, *eps, *sink),
        "pre_saved": (x, phi, alpha, beta, weight, n, layout, False, *eps, *sink),
        "pre_backward": (f, post, P, x, h, ms, pre, L, phi, alpha, beta, weight, act(torch.randn(x.shape)), n,
                         layout, False, *eps, *sink),
        # TE's f32 x-gradient buffer (kwarg-only, last: _call_args).
        "aggregate_backward_into": (f, x, pre, n, layout, torch.randn(x.shape)),
        "expand_combine_backward_into": (act(torch.randn_like(x, dtype=torch.float32)), f, post, x, P, bias, n,
                                         layout, torch.randn(x.shape)),
    }[op]


def _call_args(op, args):
    """(positional, keyword) arguments of torch.ops.mhc.<op> from `args` in schema order."""
    schema = getattr(torch.ops.mhc, op).default._schema.arguments
    npos = sum(not a.kwarg_only for a in schema)
    return tuple(args[:npos]), {a.name: v for a, v in zip(schema[npos:], args[npos:])}


OPS = ["project", "scale", "sinkhorn", "aggregate", "expand_combine", "pre", "pre_saved"]
OPS += [op + "_backward" for op in OPS[:5]]
OPS += ["aggregate_backward_into", "expand_combine_backward_into", "pre_backward"]


def _name(d):
    return "-".join(f"{k}={str(v).replace('torch.', '')}" for k, v in d.items())


# AOT dispatch (the slow part of opcheck, about a second a call) for the two
# cases where the dtypes of the outputs differ most: float64 everywhere, and
# bfloat16 activations and parameters with float32 mixing tensors.
_AOT = (F64, torch.bfloat16)


@pytest.mark.parametrize("op,d", [(op, d) for op in OPS for d in _dtypes(op)],
                         ids=[f"{op}-{_name(d)}" for op in OPS for d in _dtypes(op)])
def test_opcheck_every_dtype(op, d):
    """Schema, autograd registration and the fake kernel (dtypes, shapes,
    strides, device) against the real op for every accepted dtype
    combination, and AOT dispatch for the _AOT ones. The forward ops' inputs
    require grad (their backward runs too); the backward ops' do not (they
    refuse double backward: test_hardening.py)."""
    grad = "_backward" not in op
    args = tuple(a.requires_grad_(grad) if isinstance(a, torch.Tensor) else a for a in _args(op, d))
    utils = ["test_schema", "test_autograd_registration", "test_faketensor"]
    if d["act"] in _AOT and d["proj"] in _AOT and d["scale"] in _AOT and d["bias"] in _AOT + (None,):
        utils.append("test_aot_dispatch_dynamic")
    args, kwargs = _call_args(op, args)
    torch.library.opcheck(getattr(torch.ops.mhc, op), args, kwargs, test_utils=utils)


def _strided(t):
    """t with its first two dims' strides swapped (non-contiguous, same values)."""
    if not isinstance(t, torch.Tensor) or t.dim() < 2:
        return t
    return t.transpose(0, 1).contiguous().transpose(0, 1)


@pytest.mark.parametrize("op", OPS)
def test_fake_kernel_is_the_real_op_on_meta_tensors(op):
    """Called on meta tensors, every op gives the real op's output shapes,
    dtypes and strides, on the meta device, for each accepted dtype
    combination, with contiguous and with non-contiguous inputs."""
    for d in _dtypes(op):
        keep = 1 if op.endswith("_into") else 0  # (the buffer must be contiguous)
        strided = _args(op, d)
        strided = tuple(_strided(a) for a in strided[:len(strided) - keep]) + strided[len(strided) - keep:]
        for args in (_args(op, d, layout="cn"), strided):
            real = getattr(torch.ops.mhc, op)(*_call_args(op, args)[0], **_call_args(op, args)[1])
            margs = tuple(a.to("meta") if isinstance(a, torch.Tensor) else a for a in args)
            meta = getattr(torch.ops.mhc, op)(*_call_args(op, margs)[0], **_call_args(op, margs)[1])
            real, meta = (real, meta) if isinstance(real, tuple) else ((real,), (meta,))
            assert len(real) == len(meta)
            for r, m in zip(real, meta):
                assert m.device.type == "meta", (op, _name(d))
                assert (m.shape, m.dtype, m.stride()) == (r.shape, r.dtype, r.stride()), (op, _name(d))


@pytest.mark.parametrize("act", [torch.bfloat16, torch.float16])
def test_opcheck_project_backward_with_an_f32_acc(act):
    """project_backward with TE's f32 buffer as acc (2-byte x): x's gradient
    in x's dtype, buffer + its own summed in f32; the fake kernel agrees."""
    h, ms, x, phi, w, *rest = _args("project_backward", dict(act=act, mix=torch.float32, proj=torch.float32,
                                                              scale=torch.float32, bias=None, weight=True))
    acc = torch.randn(x.shape)
    args = (h, ms, x, phi, w, *rest, acc)
    torch.library.opcheck(torch.ops.mhc.project_backward, args,
                          test_utils=["test_schema", "test_autograd_registration", "test_faketensor"])
    gx, _, _ = torch.ops.mhc.project_backward(*args)
    own, _, _ = torch.ops.mhc.project_backward(h.double(), ms.double(), x.double(), phi.double(), w.double(),
                                               *rest)
    assert gx.dtype == act
    want = own + acc.double()
    assert ((gx.double() - want).abs().max() / want.abs().max()).item() <= 2 ** -7  # (one rounding to act)


# --- torch.compile with Inductor, one test per op ----------------------------

def _tuple(out):
    return out if isinstance(out, tuple) else (out,)


def _compare_inductor(fn, inputs, want64=None):
    """fn compiled by Inductor (fullgraph) against eager: its outputs, a
    scalar the compiled graph reduces from every output (through random
    weights, so Inductor generates kernels reading each output: the case
    that was off by 4e37 while a fake kernel said float32 for a float64
    output) and that scalar's gradient for every input. `want64` (float64
    MATH.md) checks the eager outputs too."""
    torch._dynamo.reset()
    eager_in = [t.detach().clone().requires_grad_() for t in inputs]
    comp_in = [t.detach().clone().requires_grad_() for t in inputs]
    ws = [torch.randn(o.shape, dtype=torch.float64) for o in _tuple(fn(*inputs))]

    def run(*a):
        outs = _tuple(fn(*a))
        return (*outs, sum((o.double() * w).sum() for o, w in zip(outs, ws)))

    eager = run(*eager_in)
    compiled_run = torch.compile(run, backend="inductor", fullgraph=True)
    compiled = compiled_run(*comp_in)
    # Without grad too: a graph with no autograd (the 4e37 case).
    for c_out in (compiled, compiled_run(*[t.detach() for t in inputs])):
        for e, c in zip(eager, c_out):
            assert (c.shape, c.dtype) == (e.shape, e.dtype)
            torch.testing.assert_close(c, e, rtol=1e-12, atol=1e-12)
    if want64 is not None:
        for e, w in zip(eager, want64(*[t.detach() for t in inputs])):
            assert ((e - w).norm() / w.norm()).item() <= 1e-12
    eager[-1].backward()
    compiled[-1].backward()
    for e, c in zip(eager_in, comp_in):
        torch.testing.assert_close(c.grad, e.grad, rtol=1e-12, atol=1e-12)


def _f64(*shape, scale=1.0, shift=0.0):
    return scale * torch.randn(*shape, dtype=torch.float64) + shift


M, n, C = 5, 3, 4
N, K = 2 * n + n * n, n * C


def test_inductor_project():
    x, phi, w = _f64(M, C, n), _f64(N, K, scale=K ** -0.5), _f64(K, scale=0.1, shift=1.0)
    _compare_inductor(lambda x, phi, w: mhc.project(x, phi, w, layout="cn"), [x, phi, w],
                      lambda x, phi, w: ref.project(x, phi, w))


def test_inductor_scale():
    h, ms, alpha, beta = _f64(M, N), torch.rand(M, dtype=torch.float64) + 0.5, _f64(3, shift=1.0), _f64(N)
    _compare_inductor(lambda *a: mhc.scale(*a, norm_eps=1e-6, pre_eps=1e-6, post_mult=2.0), [h, ms, alpha, beta],
                      lambda *a: ref.scale(*a, n))


@pytest.mark.parametrize("mode", ["log", "softmax_eps"])
def test_inductor_sinkhorn(mode):
    _compare_inductor(lambda L: mhc.sinkhorn(L, mode=mode, iters=4), [_f64(M, n, n)],
                      lambda L: (ref.sinkhorn(L, mode, 4),))


def test_inductor_aggregate():
    x, pre = _f64(M, n, C), torch.rand(M, n, dtype=torch.float64)
    _compare_inductor(lambda x, pre: mhc.aggregate(x, pre), [x, pre], lambda x, pre: (ref.aggregate(x, pre),))


def test_inductor_expand_combine():
    f, post, x, P, bias = _f64(M, C), 2 * torch.rand(M, n, dtype=torch.float64), _f64(M, C, n), _f64(M, n, n), _f64(C)
    _compare_inductor(lambda *a: mhc.expand_combine(*a, layout="cn"), [f, post, x, P, bias],
                      lambda *a: (ref.expand_combine(*a, layout="cn"),))


def test_inductor_pre():
    x, phi, alpha, beta, w = _f64(M, n, C), _f64(N, K, scale=K ** -0.5), _f64(3, shift=1.0), _f64(N), _f64(K)

    def want(x, phi, alpha, beta, w):
        h, ms = ref.project(x, phi, w)
        pre, post, L = ref.scale(h, ms, alpha, beta, n)
        return ref.aggregate(x, pre), post, ref.sinkhorn(L, "softmax_eps", 5)

    _compare_inductor(lambda *a: mhc.pre(*a, iters=5), [x, phi, alpha, beta, w], want)


def test_inductor_float32_with_bfloat16_activations():
    """The mixed case of the kernels: bf16 x, float32 mixing outputs."""
    hc = mhc.HyperConnection(n=2, C=8, mode="log")
    x = torch.randn(4, 2, 8).bfloat16()

    def model(x):
        return hc(x, torch.tanh)

    torch._dynamo.reset()
    eager = model(x)
    compiled = torch.compile(model, backend="inductor", fullgraph=True)(x)
    assert compiled.dtype == eager.dtype == torch.bfloat16
    torch.testing.assert_close(compiled.float(), eager.float(), rtol=1e-2, atol=1e-2)
