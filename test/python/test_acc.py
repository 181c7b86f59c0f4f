"""x's gradient accumulated by the backward ops (CPU, the reference path):
aggregate_backward, project_backward and expand_combine_backward take an
optional `acc` (x's shape and dtype) and return gx = acc + their own gradient
of x, with the bits of the unfused `own.add(acc)` (docs/MATH.md, "Backward");
errors name 'acc'; opcheck and the fake kernels with acc."""

import math

import pytest
import torch

import mhc  # noqa: F401  (loads torch.ops.mhc)

ACT = (torch.bfloat16, torch.float16, torch.float32, torch.float64)
OPS = ("aggregate_backward", "project_backward", "expand_combine_backward")
GX = {"aggregate_backward": 0, "project_backward": 0, "expand_combine_backward": 2}  # gx's output index


def _args(op, M=5, n=3, C=8, layout="nc", act=torch.float32, weight=True, bias=True):
    """torch.ops.mhc.<op>'s arguments without acc (activations in `act`,
    mixing tensors float32, or every tensor float64), and x."""
    mix = torch.float64 if act == torch.float64 else torch.float32
    N, K = 2 * n + n * n, n * C
    x = torch.randn(M, n, C) if layout == "nc" else torch.randn(M, C, n)
    x, f = x.to(act), torch.randn(M, C).to(act)
    pre, post = (torch.rand(M, n) + 0.1).to(mix), (2 * torch.rand(M, n)).to(mix)
    P = torch.softmax(torch.randn(M, n, n), -2).to(mix)
    phi = (torch.randn(N, K) / math.sqrt(K)).to(mix)
    w = (1 + 0.1 * torch.randn(K)).to(mix) if weight else None
    b = (0.5 * torch.randn(C)).to(mix) if bias else None
    gh, gms = torch.randn(M, N).to(mix), torch.randn(M).to(mix)
    return x, {
        "aggregate_backward": (f, x, pre, n, layout),
        "project_backward": (gh, gms, x, phi, w, n, layout, False),
        "expand_combine_backward": (torch.randn_like(x, dtype=torch.float32).to(act), f, post, x, P, b, n, layout),
    }[op]


@pytest.mark.parametrize("layout", ["nc", "cn"])
@pytest.mark.parametrize("act", ACT, ids=[str(a).replace("torch.", "") for a in ACT])
@pytest.mark.parametrize("op", OPS)
def test_acc_is_the_unfused_add_bit_for_bit(op, act, layout):
    """gx with acc is own.add(acc) (own rounded to x's dtype, then ATen's
    add), bit for bit; the other outputs are those of the call without acc.
    acc is passed positionally and by keyword."""
    for M, n in ((1, 1), (7, 3), (4, 8)):
        x, args = _args(op, M=M, n=n, C=6, layout=layout, act=act)
        acc = torch.randn_like(x, dtype=torch.float32).to(act)
        own = getattr(torch.ops.mhc, op)(*args)
        got = getattr(torch.ops.mhc, op)(*args, acc)
        kw = getattr(torch.ops.mhc, op)(*args, acc=acc)
        i = GX[op]
        want = own[i].add(acc)
        assert got[i].dtype == x.dtype and got[i].shape == x.shape and got[i].is_contiguous()
        assert torch.equal(got[i], want) and torch.equal(kw[i], want)
        for j, (a, b) in enumerate(zip(got, own)):
            if j != i:
                assert torch.equal(a, b), (op, j)
        assert not torch.equal(got[i], own[i])  # (the test can fail: acc was added)


def test_acc_none_is_no_acc():
    for op in OPS:
        _, args = _args(op)
        for a, b in zip(getattr(torch.ops.mhc, op)(*args, None), getattr(torch.ops.mhc, op)(*args)):
            assert torch.equal(a, b)


@pytest.mark.parametrize("op", OPS)
def test_bad_acc_names_the_argument(op):
    x, args = _args(op, M=5, n=3, C=8)
    call = getattr(torch.ops.mhc, op)
    with pytest.raises(ValueError, match=r"argument 'acc' must have shape \[M, n, C\] = \[5, 3, 8\] \(n = 3\); "
                                         r"got shape \[5, 3, 7\]"):
        call(*args, torch.randn(5, 3, 7))
    with pytest.raises(ValueError, match=r"argument 'acc' must be \[M, n, C\] \(layout nc, n = 3\); got shape \[5, 24\]"):
        call(*args, torch.randn(5, 24))
    with pytest.raises(TypeError, match=r"argument 'acc' must have the dtype of 'x' \(Float\); got BFloat16"):
        call(*args, torch.randn_like(x).bfloat16())
    with pytest.raises(TypeError, match=r"argument 'acc' must be a bfloat16, float16 or float32 tensor; got Int"):
        call(*args, torch.zeros_like(x, dtype=torch.int32))
    xt, argst = _args(op, M=5, n=3, C=8, layout="cn")
    with pytest.raises(ValueError, match=r"argument 'acc' must have shape \[M, C, n\] = \[5, 8, 3\]"):
        call(*argst, torch.randn(5, 3, 8))
    with pytest.raises(ValueError, match=r"argument 'acc' is on meta but the other tensors are on cpu"):
        call(*args, torch.randn_like(x, device="meta"))


@pytest.mark.parametrize("act", ACT, ids=[str(a).replace("torch.", "") for a in ACT])
@pytest.mark.parametrize("op", OPS)
def test_opcheck_with_acc(op, act):
    """Schema, autograd registration, fake kernel and AOT dispatch with acc."""
    x, args = _args(op, act=act, layout="cn")
    acc = torch.randn_like(x, dtype=torch.float32).to(act)
    torch.library.opcheck(getattr(torch.ops.mhc, op), args + (acc,))


@pytest.mark.parametrize("op", OPS)
def test_fake_kernel_with_acc_on_meta_tensors(op):
    for layout in ("nc", "cn"):
        x, args = _args(op, layout=layout, act=torch.bfloat16, weight=False, bias=False)
        acc = torch.randn_like(x, dtype=torch.float32).bfloat16()
        real = getattr(torch.ops.mhc, op)(*args, acc)
        meta = getattr(torch.ops.mhc, op)(*(a.to("meta") if isinstance(a, torch.Tensor) else a
                                            for a in args + (acc,)))
        for r, m in zip(real, meta):
            assert m.device.type == "meta"
            assert (m.shape, m.dtype, m.stride()) == (r.shape, r.dtype, r.stride())
        with pytest.raises(ValueError, match=r"argument 'acc' is on cpu but the other tensors are on meta"):
            getattr(torch.ops.mhc, op)(*(a.to("meta") if isinstance(a, torch.Tensor) else a for a in args), acc)


def test_backward_op_with_acc_refuses_double_backward():
    x, args = _args("aggregate_backward", act=torch.float64)
    acc = torch.randn_like(x).requires_grad_()
    gx, _ = torch.ops.mhc.aggregate_backward(*args, acc)
    assert gx.requires_grad
    with pytest.raises(RuntimeError, match=r"not supported by mhc\.aggregate \(mhc\.aggregate_backward has no"):
        gx.sum().backward()
