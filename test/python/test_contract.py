"""The ops' contract (mhc/Support/OpContract.h) as the Python package sees it
through mhc._C: N of n, the pre step's fusion rule (the decision
torch.ops.mhc.pre takes on CUDA and mhc-fuse-pre takes for a static M, see
test/Passes/fuse-pre.mlir), and each op's tensor arguments against its
schema."""

import pytest
import torch

from mhc import _C, ops

OPS = ["project", "project_backward", "scale", "scale_backward", "sinkhorn", "sinkhorn_backward", "aggregate",
       "aggregate_backward", "expand_combine", "expand_combine_backward", "pre", "pre_saved", "pre_backward"]


def test_num_logits_is_2n_plus_n_squared():
    for n in range(1, _C.MAX_STREAMS + 1):
        assert _C.num_logits(n) == 2 * n + n * n
        assert ops._streams_from_logits(2 * n + n * n) == n
    for N in (0, 1, 2, 4, 9, 23, 25):
        with pytest.raises(ValueError, match="not 2n \\+ n\\^2"):
            ops._streams_from_logits(N)


@pytest.mark.parametrize("n, M, fused", [
    (1, 1 << 20, True), (4, 65536, True), (4, -1, True),  # n <= 4: at any M, known or not
    (5, 512, True), (5, 513, False),
    (6, 0, True), (6, 512, True), (6, 513, False), (6, -1, False),  # n > 4: a static M <= 512 only
    (8, 128, True), (8, 32768, False), (8, -1, False),
])
def test_pre_step_fusion_rule(n, M, fused):
    """The cases of test/Passes/fuse-pre.mlir and the rule's edges: what
    torch.ops.mhc.pre runs on CUDA (fused kernel or the four ops)."""
    assert _C.pre_step_fuses(n, M) is fused


@pytest.mark.parametrize("op", OPS)
def test_argument_rules_name_the_schemas_tensors(op):
    """Every tensor argument of the schema has a rule, and nothing else does."""
    schema = getattr(torch.ops.mhc, op).default._schema
    tensors = [a.name for a in schema.arguments if "Tensor" in str(a.type)]
    assert sorted(_C.arg_names(op)) == sorted(tensors)


def test_eager_entry_points_derive_n_from_the_shapes():
    """mhc._C's entry points read n from x (by the layout) or logits, as the
    torch.ops path's n does."""
    n, C, M = 3, 8, 5
    x = torch.randn(M, n, C)
    pre = torch.rand(M, n)
    torch.testing.assert_close(_C.aggregate(x, pre, "nc"), torch.ops.mhc.aggregate(x, pre, n, "nc"))
    xt = x.transpose(1, 2).contiguous()
    torch.testing.assert_close(_C.aggregate(xt, pre, "cn"), torch.ops.mhc.aggregate(xt, pre, n, "cn"))
    logits = torch.randn(M, n, n)
    torch.testing.assert_close(_C.sinkhorn(logits, "log", 5, 0.0), torch.ops.mhc.sinkhorn(logits, n, "log", 5, 0.0))
