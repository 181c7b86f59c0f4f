"""Fusion under torch.compile: per-op mhc calls become the fused ops.

A model written with mhc.project, scale, sinkhorn, aggregate and
expand_combine (or HyperConnection.pre / post per layer) gets, under
torch.compile, the ops that the compiler's --mhc-fuse-pre and
--mhc-fuse-layers give a graph (docs/design/seam.md):

- project -> scale -> sinkhorn -> aggregate of one x with one set of
  attributes, each intermediate used only by the next op: one
  torch.ops.mhc.pre (its y, post and P replace aggregate's, scale's and
  sinkhorn's results);
- an expand_combine whose x_next is the x of a pre step (one just fused, or
  a torch.ops.mhc.pre of the model): one torch.ops.mhc.post_pre, whose x_next
  serves expand_combine's other users.

The rewrite runs on Dynamo's graph before AOTAutograd traces it (Inductor's
pre-grad pass, or mhc.compile_backend), so the backward is the fused ops' own
autograd nodes (the seam sums x's gradient in its chain). A chain that does
not match exactly stays as it is. docs/PYTORCH.md says why this hook.

This file: the pass and its registration; reading the graph is
_fusion_graph.py's, matching and replacing the chains _fusion_rewrites.py's.
"""

import collections
import importlib.abc
import importlib.util
import sys

import torch

from ._fusion_graph import _MHC, _is, _packet
from ._fusion_rewrites import _fuse_pre_chain, _fuse_seam, _match_pre_chain, _match_seam

_stats = collections.Counter()


# --- the pass -------------------------------------------------------------------

def fuse_graph(graph):
    """Rewrites `graph` (a torch.fx.Graph or GraphModule from Dynamo, before
    autograd): pre-step chains into torch.ops.mhc.pre, then seams into
    torch.ops.mhc.post_pre; recompiles the GraphModule that owns it. Returns
    {"pre": count, "post_pre": count}."""
    graph = graph.graph if isinstance(graph, torch.fx.GraphModule) else graph
    gm = graph.owning_module
    counts = collections.Counter(pre=0, post_pre=0)
    if not any(_packet(node) is not None for node in graph.nodes):
        return dict(counts)
    for aggregate in [node for node in graph.nodes if _is(node, _MHC.aggregate)]:
        chain = _match_pre_chain(aggregate)
        if chain is not None:
            _fuse_pre_chain(graph, chain)
            counts["pre"] += 1
    for combine in [node for node in graph.nodes if _is(node, _MHC.expand_combine)]:
        match = _match_seam(combine)
        if match is not None:
            _fuse_seam(graph, combine, match)
            counts["post_pre"] += 1
    if counts["pre"] or counts["post_pre"]:
        from torch._inductor.pattern_matcher import stable_topological_sort
        stable_topological_sort(graph)  # results used before the fused op's place
        graph.lint()
        if isinstance(gm, torch.fx.GraphModule):
            gm.recompile()
    _record(graph, counts)
    return dict(counts)


# --- registration and counts ------------------------------------------------------

_FUSED_MARK = "_mhc_compile_fusion_done"


def _fuse_once(graph):
    """fuse_graph, once per graph (compile_backend's graph reaches Inductor's
    hook too); for a GraphModule, also on the subgraphs it holds (those of
    higher-order ops such as activation checkpointing: Inductor's hook is
    called on each of them itself)."""
    graphs = [m.graph for m in graph.modules() if isinstance(m, torch.fx.GraphModule)] if isinstance(
        graph, torch.fx.GraphModule) else [graph]
    for g in graphs:
        if not getattr(g, _FUSED_MARK, False):
            fuse_graph(g)
            setattr(g, _FUSED_MARK, True)


def _record(graph, counts):
    """Adds one graph's rewrites and the mhc ops it holds after them to the counts."""
    ops = collections.Counter(_packet(node)._qualified_op_name[len("mhc::"):] for node in graph.nodes
                              if _packet(node) is not None)
    if not ops:
        return
    _stats["graphs"] += 1
    _stats.update(counts)
    _stats.update({"op:" + name: count for name, count in ops.items()})


def compile_stats():
    """What the fusion did since the last reset_compile_stats(): graphs
    (those holding mhc ops it saw), pre and post_pre (the rewrites), and ops
    (each mhc op's count in those graphs after the rewrites)."""
    return dict(graphs=_stats["graphs"], pre=_stats["pre"], post_pre=_stats["post_pre"],
                ops={key[len("op:"):]: count for key, count in sorted(_stats.items()) if key.startswith("op:")})


def reset_compile_stats():
    """Sets compile_stats()'s counts to zero."""
    _stats.clear()


class _PreGradPass:
    """Inductor's pre_grad_custom_pass: the fusion, then the pass that was
    installed before it (if any)."""

    def __init__(self, chained):
        self.chained = chained

    def __call__(self, graph):
        _fuse_once(graph)
        if self.chained is not None:
            self.chained(graph)


def _install(config, enabled):
    """Puts the fusion into (or takes it out of) Inductor's config; whether it was in."""
    current = config.pre_grad_custom_pass
    was = isinstance(current, _PreGradPass)
    if enabled and not was:
        config.pre_grad_custom_pass = _PreGradPass(current)
    elif not enabled and was:
        config.pre_grad_custom_pass = current.chained
    return was


_CONFIG = "torch._inductor.config"


class _InstallOnImport(importlib.abc.MetaPathFinder):
    """Installs the fusion once torch._inductor.config is imported (importing it
    in `import mhc` would import torch._dynamo, over a second). One-shot: it
    leaves sys.meta_path at the first import of that module."""

    def find_spec(self, name, path, target=None):
        if name != _CONFIG:
            return None
        _remove_import_hook()
        spec = importlib.util.find_spec(name)
        run = getattr(spec.loader, "exec_module", None) if spec is not None else None
        if run is None:
            return spec  # an unusual loader: enable_compile_fusion() installs it by hand

        def exec_module(module):
            run(module)
            _install(sys.modules.get(name, module), True)

        spec.loader.exec_module = exec_module
        return spec


def _remove_import_hook():
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _InstallOnImport)]


def enable_compile_fusion(enabled=True):
    """Installs (or, with enabled=False, removes) the fusion as Inductor's
    pre-grad pass (torch._inductor.config.pre_grad_custom_pass), keeping a
    pass installed there before it; until Inductor's config is imported, an
    import hook waits to install it. `import mhc` enables it. Returns whether
    it was enabled."""
    pending = any(isinstance(f, _InstallOnImport) for f in sys.meta_path)
    _remove_import_hook()
    config = sys.modules.get(_CONFIG)
    if config is None:
        if enabled:
            sys.meta_path.insert(0, _InstallOnImport())
        return pending
    return _install(config, enabled) or pending


def compile_backend(inner="inductor"):
    """A torch.compile backend: the fusion on Dynamo's graph, then `inner` (a
    backend name, as torch.compile takes, or a backend callable), for backends
    other than Inductor (whose pre-grad hook needs no wrapper):

        torch.compile(model, backend=mhc.compile_backend("aot_eager"))
    """
    from torch._dynamo.backends.registry import lookup_backend
    inner_backend = lookup_backend(inner) if isinstance(inner, str) else inner

    def backend(gm, example_inputs):
        _fuse_once(gm)
        return inner_backend(gm, example_inputs)

    return backend


enable_compile_fusion()  # on `import mhc`: without any code change, torch.compile gets the fused ops
