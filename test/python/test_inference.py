"""mhc.inference (torch.ops.mhc.post_pre_out, pre_out, expand_combine_out) on
the CPU reference path: results bitwise those of mhc.post_pre, mhc.pre and
mhc.post, written into the caller's tensors; opcheck, fake kernels and
torch.compile(fullgraph); the errors for wrong out= tensors and for calls
that would need a gradient. test/gpu/test_inference_gpu.py runs the CUDA
kernels and CUDA graphs."""

import math

import pytest
import torch

import mhc
import mhc.inference as mi

torch.manual_seed(0)

TE = dict(layout="cn", tf32=True, norm_eps=torch.finfo(torch.float32).eps, pre_eps=0.0, post_mult=2.0, mode="log",
          iters=20, eps=1e-6)
DEEPSEEK = dict(layout="nc", tf32=False, norm_eps=1e-6, pre_eps=1e-6, post_mult=2.0, mode="softmax_eps", iters=20,
                eps=1e-6)


def seam_inputs(M, n, C, layout, bias=True, weight=True, act=torch.float32, param=torch.float32):
    """One seam's inputs (MATH.md's ranges): layer l's f, post, x, P, bias; layer l+1's phi, alpha, beta, weight."""
    N, K = 2 * n + n * n, n * C
    x = torch.randn(M, n, C) if layout == "nc" else torch.randn(M, C, n)
    return dict(f=torch.randn(M, C).to(act), post=2 * torch.sigmoid(torch.randn(M, n)), x=x.to(act),
                P=torch.softmax(torch.randn(M, n, n), -2),
                bias=(0.5 * torch.randn(C)).to(param) if bias else None,
                phi=(torch.randn(N, K) / math.sqrt(K)).to(param), alpha=(torch.rand(3) + 0.5).to(param),
                beta=(0.5 * torch.randn(N)).to(param),
                weight=(1 + 0.1 * torch.randn(K)).to(param) if weight else None)


def seam_args(t):
    return t["f"], t["post"], t["x"], t["P"], t["phi"], t["alpha"], t["beta"], t["weight"], t["bias"]


def pre_args(t):
    return t["x"], t["phi"], t["alpha"], t["beta"], t["weight"]


def post_args(t):
    return t["f"], t["post"], t["x"], t["P"], t["bias"]


def assert_bitwise(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        assert torch.equal(g, w), (g - w).abs().max()


# n 1..8, both layouts, both conventions, every bias/weight combination, odd M including 1.
CASES = [(n, conv, (1, 3, 5)[(n + (conv == "te")) % 3], n % 2 == 0, n % 4 < 2)
         for n in range(1, 9) for conv in ("deepseek", "te")]


def _ids(c):
    return "n{}-{}-M{}-bias{:d}-w{:d}".format(*c)


@pytest.mark.parametrize("case", CASES, ids=_ids)
@pytest.mark.parametrize("act", (torch.float32, torch.bfloat16), ids=("f32", "bf16"))
def test_bitwise_equal_to_the_training_forward(case, act):
    """post_pre, pre and post write exactly the training ops' results (no
    grad mode), into the caller's tensors (same storage before and after)."""
    n, conv, M, bias, weight = case
    opts = dict(TE if conv == "te" else DEEPSEEK, iters=5)
    layout = opts["layout"]
    t = seam_inputs(M, n, 16, layout, bias, weight, act=act)
    with torch.no_grad():
        out = mi.empty_post_pre(t["x"], layout=layout)
        ptrs = [o.data_ptr() for o in out]
        assert mi.post_pre(*seam_args(t), out=out, **opts) is out
        assert_bitwise(out, mhc.post_pre(*seam_args(t), **opts))
        assert [o.data_ptr() for o in out] == ptrs
        pre_out = mi.pre(*pre_args(t), out=mi.empty_pre(t["x"], layout=layout), **opts)
        assert_bitwise(pre_out, mhc.pre(*pre_args(t), **opts))
        post_out = mi.post(*post_args(t), out=mi.empty_post(t["x"]), layout=layout)
        assert_bitwise((post_out,), (mhc.post(*post_args(t), layout=layout),))


def test_torch_ops_take_out_keywords_and_return_nothing():
    t = seam_inputs(3, 4, 8, "nc")
    out = mi.empty_post_pre(t["x"])
    with torch.no_grad():
        r = torch.ops.mhc.post_pre_out(t["f"], t["post"], t["x"], t["P"], t["bias"], t["phi"], t["alpha"], t["beta"],
                                       t["weight"], 4, "nc", False, 1e-6, 1e-6, 2.0, "softmax_eps", 20, 1e-6,
                                       x_next=out[0], y=out[1], post_next=out[2], P_next=out[3])
    assert r is None
    assert_bitwise(out, mhc.post_pre(*seam_args(t)))


def test_mixed_parameter_dtypes_and_float64():
    """bf16 parameters with a float32 bias (the separate ops' path), and float64 everywhere."""
    t = seam_inputs(4, 3, 8, "nc", act=torch.bfloat16, param=torch.bfloat16)
    t["bias"] = t["bias"].float()
    with torch.no_grad():
        assert_bitwise(mi.post_pre(*seam_args(t), out=mi.empty_post_pre(t["x"])), mhc.post_pre(*seam_args(t)))
    t = {k: None if v is None else v.double() for k, v in seam_inputs(2, 2, 8, "cn").items()}
    with torch.no_grad():
        out = mi.post_pre(*seam_args(t), out=mi.empty_post_pre(t["x"], layout="cn"), layout="cn")
    assert out[2].dtype == torch.float64
    assert_bitwise(out, mhc.post_pre(*seam_args(t), layout="cn"))


def test_inference_mode_and_version_counters():
    """Under inference_mode the calls work on inference tensors; under no_grad
    the out= tensors' versions move, as an in-place op's do."""
    t = seam_inputs(2, 4, 8, "nc")
    with torch.inference_mode():
        ti = {k: None if v is None else v.clone() for k, v in t.items()}
        out = mi.post_pre(*seam_args(ti), out=mi.empty_post_pre(ti["x"]))
        assert_bitwise(out, mhc.post_pre(*seam_args(ti)))
    out = mi.empty_post_pre(t["x"])
    before = [o._version for o in out]
    with torch.no_grad():
        mi.post_pre(*seam_args(t), out=out)
    assert all(o._version > b for o, b in zip(out, before))


def _op_calls(t, outs, requires_grad=False):
    """(op, args, kwargs) of the three torch ops on `t` with out= tensors `outs` (a seam's four)."""
    g = {k: None if v is None else v.detach().requires_grad_(requires_grad and v.is_floating_point())
         for k, v in t.items()}
    x_next, y, post_next, P_next = outs
    attrs = (4, "nc", False, 1e-6, 1e-6, 2.0, "softmax_eps", 3, 1e-6)
    return [
        (torch.ops.mhc.post_pre_out.default, (g["f"], g["post"], g["x"], g["P"], g["bias"], g["phi"], g["alpha"],
                                              g["beta"], g["weight"], *attrs),
         dict(x_next=x_next, y=y, post_next=post_next, P_next=P_next)),
        (torch.ops.mhc.pre_out.default, (g["x"], g["phi"], g["alpha"], g["beta"], g["weight"], *attrs),
         dict(y=y, post=post_next, P=P_next)),
        (torch.ops.mhc.expand_combine_out.default, (g["f"], g["post"], g["x"], g["P"], g["bias"], 4, "nc"),
         dict(out=x_next)),
    ]


@pytest.mark.parametrize("which", (0, 1, 2), ids=("post_pre_out", "pre_out", "expand_combine_out"))
@pytest.mark.parametrize("act", (torch.float32, torch.bfloat16, torch.float64), ids=("f32", "bf16", "f64"))
def test_opcheck(which, act):
    """Schema (the out= tensors are the only ones written), the fake kernel
    and AOT dispatch (functionalization of the mutable op) with inputs that
    need no gradient; the Autograd registration with inputs that do."""
    param = torch.float64 if act == torch.float64 else torch.float32
    t = seam_inputs(3, 4, 8, "nc", act=act, param=param)
    if act == torch.float64:
        t = {k: None if v is None else v.double() for k, v in t.items()}
    op, args, kwargs = _op_calls(t, mi.empty_post_pre(t["x"]))[which]
    torch.library.opcheck(op, args, kwargs, test_utils=["test_schema", "test_faketensor", "test_aot_dispatch_dynamic"])
    op, args, kwargs = _op_calls(t, mi.empty_post_pre(t["x"]), requires_grad=True)[which]
    torch.library.opcheck(op, args, kwargs, test_utils=["test_autograd_registration"])


@pytest.mark.parametrize("conv", ("deepseek", "te"))
def test_torch_compile_fullgraph(conv):
    """A first pre, two seams and a last post under torch.compile(fullgraph=True) (Inductor): the same bits
    as eager, in the caller's tensors."""
    opts = dict(TE if conv == "te" else DEEPSEEK, iters=4)
    layout = opts["layout"]
    t = seam_inputs(3, 4, 8, layout)

    def layers(t, outs):  # the block between seams is y / 2: exact, so Inductor's bits are eager's
        y, post, P = mi.pre(*pre_args(t), out=outs[0], **opts)
        x = t["x"]
        for out in outs[1:3]:
            x, y, post, P = mi.post_pre(0.5 * y, post, x, P, t["phi"], t["alpha"], t["beta"], t["weight"],
                                        t["bias"], out=out, **opts)
        return mi.post(0.5 * y, post, x, P, t["bias"], out=outs[3], layout=layout)

    def fresh():
        return [mi.empty_pre(t["x"], layout=layout), mi.empty_post_pre(t["x"], layout=layout),
                mi.empty_post_pre(t["x"], layout=layout), mi.empty_post(t["x"])]

    with torch.no_grad():
        want_outs, got_outs = fresh(), fresh()
        want = layers(t, want_outs)
        got = torch.compile(layers, fullgraph=True)(t, got_outs)
    assert torch.equal(got, want)
    assert got.data_ptr() == got_outs[3].data_ptr()
    for g, w in zip(got_outs[:3], want_outs[:3]):
        assert_bitwise(g, w)


def test_meta_tensors():
    """The fake kernels on meta tensors: nothing to compute, the out= checks hold."""
    t = {k: None if v is None else v.to("meta") for k, v in seam_inputs(3, 4, 8, "nc").items()}
    with torch.no_grad():
        mi.post_pre(*seam_args(t), out=mi.empty_post_pre(t["x"]))
        out = mi.empty_post_pre(t["x"])
        with pytest.raises(ValueError, match=r"out argument 'y' must be a contiguous torch.float32 tensor of shape "
                                             r"\[3, 8\] on meta; got a torch.float32 tensor of shape \[3, 9\]"):
            mi.post_pre(*seam_args(t), out=(out[0], torch.empty(3, 9, device="meta"), *out[2:]))


def _wrong_outs(t, layout):
    """(out tuple, message pattern) for each kind of wrong out= tensor of post_pre."""
    x_next, y, post_next, P_next = mi.empty_post_pre(t["x"], layout=layout)
    M, C = y.shape
    return [
        ((x_next, y.double(), post_next, P_next),
         rf"mhc.post_pre_out: out argument 'y' must be a contiguous torch.float32 tensor of shape \[{M}, {C}\] on "
         rf"cpu; got a torch.float64 tensor of shape \[{M}, {C}\] on cpu"),
        ((x_next, y, post_next[:, :2], P_next),
         rf"out argument 'post_next' must be a contiguous torch.float32 tensor of shape \[{M}, 4\] on cpu; got a "
         rf"torch.float32 tensor of shape \[{M}, 2\]"),
        ((x_next, y, post_next, P_next.transpose(1, 2)), r"out argument 'P_next' .* \(not contiguous\)"),
        ((x_next[:, :, :1], y, post_next, P_next), r"out argument 'x_next' must be a contiguous torch.float32 tensor "
                                                   r"of shape \[3, (4, 8|8, 4)\]"),
        ((t["x"], y, post_next, P_next), r"out argument 'x_next' shares memory with input 'x'"),
        ((x_next, x_next.view(-1)[:M * C].view(M, C), post_next, P_next),
         r"out argument 'y' shares memory with out argument 'x_next'"),
    ]


@pytest.mark.parametrize("layout", ("nc", "cn"))
def test_wrong_out_tensors_name_the_argument(layout):
    t = seam_inputs(3, 4, 8, layout)
    with torch.no_grad():
        for out, message in _wrong_outs(t, layout):
            with pytest.raises(ValueError, match=message):
                mi.post_pre(*seam_args(t), out=out, layout=layout)
            # The same check through torch.ops (not mhc._C's eager entry point).
            with pytest.raises(ValueError, match=message):
                torch.ops.mhc.post_pre_out(t["f"], t["post"], t["x"], t["P"], t["bias"], t["phi"], t["alpha"],
                                           t["beta"], t["weight"], 4, layout, False, 1e-6, 1e-6, 2.0, "log", 3, 0.0,
                                           x_next=out[0], y=out[1], post_next=out[2], P_next=out[3])


def test_wrong_out_tensors_of_pre_and_post():
    t = seam_inputs(3, 4, 8, "nc")
    y, post, P = mi.empty_pre(t["x"])
    with torch.no_grad():
        with pytest.raises(ValueError, match=r"mhc.pre_out: out argument 'P' must be a contiguous torch.float32 "
                                             r"tensor of shape \[3, 4, 4\] on cpu; got a torch.bfloat16 tensor"):
            mi.pre(*pre_args(t), out=(y, post, P.bfloat16()))
        with pytest.raises(ValueError, match=r"mhc.pre_out: out argument 'y' shares memory with input 'x'"):
            mi.pre(*pre_args(t), out=(t["x"].view(-1)[:24].view(3, 8), post, P))
        with pytest.raises(ValueError, match=r"mhc.expand_combine_out: out argument 'out' must be a contiguous "
                                             r"torch.float32 tensor of shape \[3, 4, 8\] on cpu; got a torch.float32 "
                                             r"tensor of shape \[3, 8, 4\]"):
            mi.post(*post_args(t), out=torch.empty(3, 8, 4))
        with pytest.raises(TypeError, match=r"mhc.inference.pre: argument 'out' must be a tuple \(y, post, P\), e.g. "
                                            r"from mhc.inference.empty_pre\(x\); got a tuple of 2"):
            mi.pre(*pre_args(t), out=(y, post))
        with pytest.raises(TypeError, match=r"argument 'out' must be a tuple \(x_next, y, post_next, P_next\)"):
            mi.post_pre(*seam_args(t), out=y)
        with pytest.raises(ValueError, match=r"mhc.inference.empty_pre: argument 'x' must be \[M, n, C\] \(one token "
                                             r"dim; flatten the others\); got shape \(1, 3, 4, 8\)"):
            mi.empty_pre(t["x"][None])


def test_a_call_that_needs_a_gradient_raises():
    """Grad mode on and an input requiring grad: the error says what to do; under no_grad the same call runs."""
    t = seam_inputs(2, 4, 8, "nc")
    t["phi"].requires_grad_()
    out = mi.empty_post_pre(t["x"])
    with pytest.raises(RuntimeError, match=r"mhc.post_pre_out records no gradient: call it under torch.no_grad\(\) "
                                           r"or torch.inference_mode\(\), or use mhc.post_pre for training"):
        mi.post_pre(*seam_args(t), out=out)
    with pytest.raises(RuntimeError, match=r"mhc.pre_out records no gradient"):
        mi.pre(*pre_args(t), out=mi.empty_pre(t["x"]))
    f = t["f"].clone().requires_grad_()
    with pytest.raises(RuntimeError, match=r"mhc.expand_combine_out records no gradient.* use mhc.post for"):
        mi.post(f, t["post"], t["x"], t["P"], t["bias"], out=mi.empty_post(t["x"]))
    with torch.no_grad():
        mi.post_pre(*seam_args(t), out=out)
    assert not any(o.requires_grad for o in out)


def test_recorded_specs_are_the_training_forwards():
    """mhc.export.record_specs (mhc precompile's list of kernels) sees the same specs for the out= ops as
    for the training ops they match."""
    from mhc import export
    t = seam_inputs(16, 4, 64, "cn")
    opts = dict(TE, iters=20)

    def inference(x):
        y, post, P = mi.pre(x, t["phi"], t["alpha"], t["beta"], out=mi.empty_pre(x, layout="cn"), **opts)
        out = mi.post_pre(y, post, x, P, t["phi"], t["alpha"], t["beta"], out=mi.empty_post_pre(x, layout="cn"),
                          **opts)
        return mi.post(out[1], out[2], out[0], out[3], out=mi.empty_post(x), layout="cn")

    def training(x):
        y, post, P = mhc.pre(x, t["phi"], t["alpha"], t["beta"], **opts)
        x2, y2, post2, P2 = mhc.post_pre(y, post, x, P, t["phi"], t["alpha"], t["beta"], **opts)
        return mhc.post(y2, post2, x2, P2, layout="cn")

    got = export.record_specs(inference, (t["x"],), arch="sm_90a")
    assert got == export.record_specs(training, (t["x"],), arch="sm_90a")
    assert [s.split(";")[0] for s in got] == ["pre.fwd", "post_pre.fwd", "expand_combine.fwd"]
