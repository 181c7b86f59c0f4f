"""Fusion under torch.compile (mhc.compile_fusion, issue 37 part 2), on CPU.

Models written with the per-op calls (mhc.project, scale, sinkhorn,
aggregate, expand_combine) or per-layer HyperConnection calls, eager against
torch.compile(fullgraph=True): the output and every gradient within SPEC.md's
float32 bound (1e-5, normwise relative), the rewrites counted
(mhc.compile_stats) and the fused ops found in the forward and backward graphs
AOTAutograd hands on. Inductor's pre-grad hook (what `import mhc` installs) is
exercised once; the other cases use mhc.compile_backend("aot_eager"), the same
rewrite in front of a backend that compiles in seconds.
"""

import collections
import subprocess
import sys

import pytest
import torch
from functorch.compile import make_boxed_func
from torch import nn
from torch._dynamo.backends.common import aot_autograd
from torch.utils.checkpoint import checkpoint

import mhc

BOUND = 1e-5  # SPEC.md: float32 activations without TF32


class PerOpLayer(nn.Module):
    """One mHC layer around a Linear block, written op by op. `variant`
    breaks the pre-step pattern: "half_pre" aggregates with 0.5 * pre,
    "keep_logits" also returns the logits, "mutate" scales x in place between
    project and aggregate."""

    def __init__(self, n, C, layout, variant=None):
        super().__init__()
        N, K = 2 * n + n * n, n * C
        self.layout, self.variant = layout, variant
        self.phi = nn.Parameter(torch.randn(N, K) / K ** 0.5)
        self.alpha = nn.Parameter(torch.rand(3) + 0.5)
        self.beta = nn.Parameter(torch.randn(N) * 0.5)
        self.norm_weight = nn.Parameter(1 + 0.1 * torch.randn(K))
        self.bias = nn.Parameter(torch.randn(C) * 0.5)
        self.block = nn.Linear(C, C)

    def forward(self, x, kept):
        h, ms = mhc.project(x, self.phi, self.norm_weight, layout=self.layout)
        if self.variant == "mutate":  # (inference only: autograd forbids it)
            x.mul_(1.5)
        pre, post, logits = mhc.scale(h, ms, self.alpha, self.beta)
        P = mhc.sinkhorn(logits)
        y = mhc.aggregate(x, 0.5 * pre if self.variant == "half_pre" else pre, layout=self.layout)
        if self.variant == "keep_logits":
            kept.append(logits)
        return mhc.expand_combine(self.block(y), post, x, P, self.bias, layout=self.layout)


class PerOpModel(nn.Module):
    def __init__(self, L=3, n=4, C=16, layout="nc", variants=()):
        super().__init__()
        variants = dict(variants)
        self.layers = nn.ModuleList(PerOpLayer(n, C, layout, variants.get(i)) for i in range(L))

    def forward(self, x):
        kept = []
        for layer in self.layers:
            x = layer(x, kept)
        return (x, *kept) if kept else x


class PerLayerModel(nn.Module):
    """HyperConnection(x, block) per layer: pre and post of each, no seams written."""

    def __init__(self, L=3, n=4, C=16, layout="nc"):
        super().__init__()
        self.hcs = nn.ModuleList(mhc.HyperConnection(n, C, layout=layout, bias=True) for _ in range(L))
        self.blocks = nn.ModuleList(nn.Linear(C, C) for _ in range(L))
        with torch.no_grad():
            for hc in self.hcs:
                hc.alpha.copy_(torch.rand(3) + 0.5)
                hc.beta.normal_(0, 0.5)
                hc.bias.normal_(0, 0.5)

    def forward(self, x):
        for hc, block in zip(self.hcs, self.blocks):
            x = hc(x, block)
        return x


def _streams(M, n, C, layout, lead=None):
    """x with M tokens ([M, n, C] / [M, C, n]) or the leading dims `lead`."""
    shape = (n, C) if layout == "nc" else (C, n)
    return torch.randn(*(lead or (M,)), *shape)


def _run(model, x, compile_fn=None):
    """model(x) (compiled with compile_fn if given) and its backward on a fixed
    loss: the outputs and the gradients of x and every parameter."""
    model.zero_grad()
    x = x.clone().requires_grad_()
    out = (compile_fn(model) if compile_fn else model)(x)
    outs = out if isinstance(out, tuple) else (out,)
    torch.manual_seed(5)
    sum((o * torch.randn_like(o)).sum() for o in outs).backward()
    return [o.detach() for o in outs], [x.grad] + [p.grad.clone() for p in model.parameters()]


def _check_close(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        rel = ((g - w).norm() / w.norm()).item()
        assert rel <= BOUND, rel


def _mhc_ops(graph):
    """Each torch.ops.mhc op's count in an ATen-level graph."""
    return collections.Counter(str(node.target).split(".")[1] for node in graph.nodes
                               if str(node.target).startswith("mhc."))


class _GraphOps:
    """An AOTAutograd backend behind mhc.compile_backend that counts the mhc
    ops of the forward and backward graphs it is handed."""

    def __init__(self):
        self.graphs = []

    def _count(self, gm, example_inputs):
        self.graphs.append(_mhc_ops(gm.graph))
        return make_boxed_func(gm.forward)

    def compile(self, model):
        inner = aot_autograd(fw_compiler=self._count, bw_compiler=self._count)
        return torch.compile(model, fullgraph=True, backend=mhc.compile_backend(inner))


def _compare(model, x):
    """Eager against compiled: values checked (the forward bit for bit: on the
    reference path the fused ops run the separate ones, and aot_eager compiles
    nothing else); returns (stats, [forward ops, backward ops])."""
    torch._dynamo.reset()
    mhc.reset_compile_stats()
    want = _run(model, x)
    ops = _GraphOps()
    got = _run(model, x, ops.compile)
    assert all(torch.equal(g, w) for g, w in zip(got[0], want[0]))
    _check_close(got[1], want[1])
    return mhc.compile_stats(), ops.graphs


FUSED_STACK_FORWARD = {"pre_saved": 1, "post_pre_saved": 2, "expand_combine": 1}
FUSED_STACK_BACKWARD = {"post_pre_backward": 2, "expand_combine_backward": 1, "project_backward": 1,
                        "scale_backward": 1, "sinkhorn_backward": 1, "aggregate_backward": 1}


def test_inductor_fuses_a_per_op_model_through_the_pre_grad_hook():
    """Plain torch.compile (Inductor): `import mhc` put the fusion into Inductor's
    pre-grad hook. 3 layers: one pre step and two seams, the last post alone."""
    from torch._inductor import config
    assert isinstance(config.pre_grad_custom_pass, mhc.compile_fusion._PreGradPass)
    torch.manual_seed(0)
    model, x = PerOpModel(layout="nc"), _streams(8, 4, 16, "nc")
    torch._dynamo.reset()
    mhc.reset_compile_stats()
    want = _run(model, x)
    ops = _GraphOps()  # the forward and backward graphs after Inductor's post-grad passes
    count = lambda graph: ops.graphs.append(_mhc_ops(graph))  # noqa: E731
    # (a plain post-grad pass is not cacheable: the caches are off, so the graphs are compiled and seen)
    with config.patch(post_grad_custom_post_pass=count, fx_graph_cache=False), \
            torch._functorch.config.patch(enable_autograd_cache=False):
        got = _run(model, x, lambda m: torch.compile(m, fullgraph=True))
    _check_close(got[0], want[0])
    _check_close(got[1], want[1])
    assert mhc.compile_stats() == {"graphs": 1, "pre": 3, "post_pre": 2,
                                   "ops": {"expand_combine": 1, "post_pre": 2, "pre": 1}}
    assert ops.graphs == [FUSED_STACK_FORWARD, FUSED_STACK_BACKWARD]


@pytest.mark.parametrize("layout,lead", [("nc", None), ("cn", (2, 4))])
def test_per_op_model_fuses_forward_and_backward(layout, lead):
    """Both layouts, [M, ...] and [s, b, ...] (reshapes between the ops): the
    forward graph holds the fused ops, the backward their gradients (two
    post_pre_backward: x's gradient summed in the seams)."""
    torch.manual_seed(1)
    stats, graphs = _compare(PerOpModel(layout=layout), _streams(8, 4, 16, layout, lead))
    assert stats == {"graphs": 1, "pre": 3, "post_pre": 2, "ops": {"expand_combine": 1, "post_pre": 2, "pre": 1}}
    assert graphs == [FUSED_STACK_FORWARD, FUSED_STACK_BACKWARD]


def test_per_layer_hyper_connections_fuse_at_the_seams():
    """HyperConnection(x, block) per layer already calls mhc.pre: the seams fuse."""
    torch.manual_seed(2)
    stats, graphs = _compare(PerLayerModel(layout="cn"), _streams(8, 4, 16, "cn"))
    assert (stats["pre"], stats["post_pre"]) == (0, 2)
    assert graphs == [FUSED_STACK_FORWARD, FUSED_STACK_BACKWARD]


class CheckpointedModel(PerOpModel):
    def forward(self, x):
        for layer in self.layers:
            x = checkpoint(layer, x, [], use_reentrant=False)
        return x


def test_checkpointed_layers_fuse_inside_their_subgraphs():
    """Activation checkpointing puts each layer in a subgraph of a higher-order
    op: its pre step fuses there; no seam crosses a checkpoint boundary."""
    torch.manual_seed(7)
    stats, _ = _compare(CheckpointedModel(), _streams(8, 4, 16, "nc"))
    assert stats == {"graphs": 3, "pre": 3, "post_pre": 0, "ops": {"expand_combine": 3, "pre": 3}}


UNFUSED_LAYER = {"project": 1, "scale": 1, "sinkhorn": 1, "aggregate": 1}


@pytest.mark.parametrize("variant", ["half_pre", "keep_logits"])
def test_a_chain_that_does_not_match_stays_unfused(variant):
    """Layer 1 breaks the pattern (aggregate with another pre, or logits also
    returned): its four ops and seam 0 stay; layers 0 and 2 and seam 1 fuse;
    the values are still eager's."""
    torch.manual_seed(3)
    stats, _ = _compare(PerOpModel(variants={1: variant}), _streams(8, 4, 16, "nc"))
    assert (stats["pre"], stats["post_pre"]) == (2, 1)
    assert stats["ops"] == {"pre": 1, "post_pre": 1, "expand_combine": 2, **UNFUSED_LAYER}


def test_a_write_in_place_inside_the_chain_stops_it():
    """x scaled in place between layer 1's project and aggregate (inference):
    one fused op would read x once, so layer 1 and seam 0 stay unfused, and the
    result is eager's."""
    torch.manual_seed(6)
    model, x = PerOpModel(L=2, variants={1: "mutate"}), _streams(8, 4, 16, "nc")
    torch._dynamo.reset()
    mhc.reset_compile_stats()
    with torch.no_grad():
        want = model(x.clone())
        got = torch.compile(model, fullgraph=True, backend=mhc.compile_backend("aot_eager"))(x.clone())
    _check_close([got], [want])
    assert mhc.compile_stats()["ops"] == {"pre": 1, "expand_combine": 2, **UNFUSED_LAYER}


@pytest.mark.parametrize("n,M,dynamic,fuses", [(4, 24, True, True), (8, 24, True, False), (8, 24, False, True),
                                               (8, 520, False, False)])
def test_pre_step_rule(n, M, dynamic, fuses):
    """mhc._C.pre_step_fuses at a static M; a dynamic M fuses for n <= 4 only
    (--mhc-fuse-pre's rule): unfused, the model keeps all its ops. A dynamic M
    stays dynamic through training: the C++ backward's sizes are symbolic
    (Autograd.cpp), so a second M reuses the graph and mark_dynamic holds."""
    assert mhc._C.pre_step_fuses(n, M) == (M <= 512 or n <= 4)
    torch.manual_seed(4)
    model, x = PerOpModel(L=2, n=n, C=8), _streams(M, n, 8, "nc")
    if dynamic:
        torch._dynamo.reset()
        mhc.reset_compile_stats()
        compiled = torch.compile(model, fullgraph=True, backend=mhc.compile_backend("aot_eager"))
        for tokens in (M, M + 16):  # a second M: no recompile, no specialisation
            x = _streams(tokens, n, 8, "nc").requires_grad_()
            torch._dynamo.mark_dynamic(x, 0)
            xe = x.detach().clone().requires_grad_()
            got, want = compiled(x), model(xe)
            got.float().square().sum().backward()
            want.float().square().sum().backward()
            _check_close([got, x.grad], [want, xe.grad])
        stats = mhc.compile_stats()
    else:
        stats, _ = _compare(model, x)
    assert (stats["pre"], stats["post_pre"]) == ((2, 1) if fuses else (0, 0))


def _dynamo_graph(model, x):
    """The graph Dynamo hands a backend for model(x)."""
    graphs = []

    def keep(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    torch.compile(model, fullgraph=True, backend=keep)(x)
    return graphs[0]


def test_enable_compile_fusion_installs_and_chains():
    """enable_compile_fusion keeps a pre-grad pass installed before it (and
    calls it after the fusion) and puts it back when disabled."""
    from torch._inductor import config
    seen = []
    with config.patch(pre_grad_custom_pass=seen.append):
        assert mhc.enable_compile_fusion() is False
        hook = config.pre_grad_custom_pass
        assert hook.chained == seen.append
        assert mhc.enable_compile_fusion() is True and config.pre_grad_custom_pass is hook
        gm = _dynamo_graph(PerOpModel(L=2), _streams(8, 4, 16, "nc"))
        mhc.reset_compile_stats()
        hook(gm.graph)
        assert seen == [gm.graph]
        assert mhc.compile_stats()["ops"] == {"pre": 1, "post_pre": 1, "expand_combine": 1}
        assert mhc.enable_compile_fusion(False) is True and config.pre_grad_custom_pass == seen.append
        assert mhc.enable_compile_fusion(False) is False
    assert isinstance(config.pre_grad_custom_pass, mhc.compile_fusion._PreGradPass)


def test_import_installs_the_hook_when_inductor_is_imported():
    """`import mhc` does not import Inductor (over a second); the hook goes in
    when Inductor's config is first imported."""
    code = ("import sys, mhc; assert 'torch._inductor.config' not in sys.modules; "
            "import torch._inductor.config as c; print(type(c.pre_grad_custom_pass).__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "_PreGradPass"
