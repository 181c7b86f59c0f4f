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
"""

import collections
import importlib.abc
import importlib.util
import operator
import sys

import torch
from torch.fx import Node

from . import _C

_MHC = torch.ops.mhc
# Calls that give their input's values in another shape or memory order
# (ops.py's _flat / _unflat / _dense put these between the ops): looked
# through when checking that two ops read one tensor, with equal shapes.
_VIEW_METHODS = frozenset({"contiguous", "reshape", "view", "flatten"})
_VIEW_FUNCTIONS = frozenset({torch.reshape, torch.flatten, torch.Tensor.contiguous, torch.Tensor.reshape,
                             torch.Tensor.view})
# In-place Python operators a Dynamo graph may hold.
_INPLACE_OPERATORS = frozenset({operator.setitem, operator.iadd, operator.isub, operator.imul, operator.itruediv,
                                operator.ifloordiv, operator.imod, operator.ipow, operator.iand, operator.ior,
                                operator.ixor, operator.ilshift, operator.irshift, operator.imatmul})

# Calls by which a Dynamo graph switches grad mode or autocast between two ops.
_MODE_SWITCHES = frozenset({"_set_grad_enabled", "set_grad_enabled", "_enter_autocast", "_exit_autocast",
                            "_enter_inference_mode", "_exit_inference_mode"})

_stats = collections.Counter()


# --- reading the graph ----------------------------------------------------------

def _packet(node):
    """The torch.ops.mhc.<op> packet a call_function node calls, else None."""
    if node.op != "call_function":
        return None
    packet = getattr(node.target, "_overloadpacket", node.target)
    return packet if isinstance(packet, torch._ops.OpOverloadPacket) and packet._qualified_op_name.startswith(
        "mhc::") else None


def _is(node, packet):
    return isinstance(node, Node) and _packet(node) is packet


def _bind(node):
    """The call's arguments by schema name, or None if they do not bind."""
    op = node.target if isinstance(node.target, torch._ops.OpOverload) else node.target.default
    bound = {}
    for i, arg in enumerate(op._schema.arguments):
        if i < len(node.args):
            bound[arg.name] = node.args[i]
        elif arg.name in node.kwargs:
            bound[arg.name] = node.kwargs[arg.name]
        elif arg.has_default_value():
            bound[arg.name] = arg.default_value
        else:
            return None
    return bound


def _value(node):
    """The example (fake) tensor Dynamo recorded for a node, or None."""
    return node.meta.get("example_value") if isinstance(node, Node) else None


def _shape(node):
    """(shape, dtype) of a node's example value, or None."""
    value = _value(node)
    return (tuple(value.shape), value.dtype) if isinstance(value, torch.Tensor) else None


def _is_view(node):
    """Whether node only reshapes its first argument (a view as another dtype does more)."""
    return ((node.op == "call_method" and node.target in _VIEW_METHODS)
            or (node.op == "call_function" and node.target in _VIEW_FUNCTIONS)) and not any(
        isinstance(a, torch.dtype) for a in (*node.args[1:], *node.kwargs.values()))


def _view_chain(node):
    """The view nodes from node down to its source, node first."""
    chain = []
    while isinstance(node, Node) and _is_view(node):
        chain.append(node)
        node = node.args[0]
    return chain


def _source(node):
    """node with the view calls in front of it stripped."""
    chain = _view_chain(node)
    return chain[-1].args[0] if chain else node


def _producer(value):
    """The node whose tuple result `value` is (through views and the getitem), else None."""
    value = _source(value)
    if isinstance(value, Node) and value.op == "call_function" and value.target is operator.getitem:
        return value.args[0]
    return None


def _reads(use, producer):
    """Whether argument `use` is `producer`'s tensor (through views) in the same shape."""
    return _source(use) is producer and _shape(use) is not None and _shape(use) == _shape(producer)


def _results(node, count):
    """node's getitem users by index (a list each), or None if anything else uses
    the tuple it returns."""
    results = [[] for _ in range(count)]
    for user in node.users:
        if user.op != "call_function" or user.target is not operator.getitem or user.args[1] not in range(count):
            return None
        results[user.args[1]].append(user)
    return results


def _only_feeds(values, consumer, views):
    """Whether every use of `values` (through views, which are collected into
    `views`) is argument use by `consumer`."""
    stack = list(values)
    while stack:
        for user in stack.pop().users:
            if user is consumer:
                continue
            if not _is_view(user):
                return False
            views.append(user)
            stack.append(user)
    return True


def _may_mutate(node):
    """Whether node may write a tensor in place (the pre-grad graph is not
    functional) or change how the ops after it run (grad mode, autocast)."""
    if node.op == "call_method":
        name = node.target
        return name.endswith("_") and not name.startswith("__") or name in ("__setitem__", "__iadd__")
    if node.op == "call_module":
        return True
    if node.op != "call_function":
        return False
    target = node.target
    if isinstance(target, torch._ops.HigherOrderOperator) or getattr(target, "__name__", "") in _MODE_SWITCHES:
        return True
    if target in _INPLACE_OPERATORS or node.kwargs.get("inplace") is True or "out" in node.kwargs:
        return True
    if isinstance(target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        op = target if isinstance(target, torch._ops.OpOverload) else getattr(target, "default", None)
        return op is None or op._schema.is_mutable
    return getattr(target, "__name__", "").endswith("_")


def _no_mutation_between(first, last):
    """No node strictly between first and last (graph order) may write in place:
    the fused op reads its inputs once, where the separate ops read them apart."""
    node = first.next
    while node is not last:
        if _may_mutate(node):
            return False
        node = node.next
    return True


def _constants(*values):
    return all(not isinstance(v, Node) for v in values)


def _one_param_dtype(*params):
    """One kernel spec has one parameter dtype (the absent optional ones aside)."""
    dtypes = {_value(p).dtype for p in params if p is not None and _value(p) is not None}
    return len(dtypes) == 1 and all(p is None or _value(p) is not None for p in params)


def _pre_step_fuses(n, x):
    """mhc._C.pre_step_fuses at x's token count; a dynamic one counts as unknown
    (M < 0), as --mhc-fuse-pre does (n <= 4 fuses at any M)."""
    M = _value(x).shape[0]
    return _C.pre_step_fuses(n, M if isinstance(M, int) else -1)


# --- the pre step ---------------------------------------------------------------

def _tuple_op(value, packet, count):
    """(node, bound arguments, getitem results) of the `packet` call that
    `value` is a result of (through views), or None."""
    node = _producer(value)
    if not _is(node, packet):
        return None
    bound, results = _bind(node), _results(node, count)
    return (node, bound, results) if bound and results else None


def _pre_chain_nodes(aggregate):
    """The project, scale and sinkhorn whose results reach `aggregate` as the
    pattern has them, with their bound arguments; None if the graph has
    anything else there (another reader of h, ms, pre or the logits)."""
    a = _bind(aggregate)
    scale_op = _tuple_op(a["pre"], _MHC.scale, 3) if a else None
    project_op = _tuple_op(scale_op[1]["h"], _MHC.project, 2) if scale_op else None
    if project_op is None:
        return None
    (scale, s, scale_out), (project, p, project_out) = scale_op, project_op
    if any(len(r) != 1 for r in (*project_out, scale_out[0], scale_out[2])):
        return None
    (h,), (ms,), (pre,), (logits,) = *project_out, scale_out[0], scale_out[2]
    sinkhorns = [u for u in _users_through_views(logits) if _is(u, _MHC.sinkhorn)]
    k = _bind(sinkhorns[0]) if len(sinkhorns) == 1 else None
    if not k or not _pre_chain_reads(p, s, k, a, (h, ms, pre, logits)):
        return None
    views = []  # between the ops, erased with them
    readers = ((h, scale), (ms, scale), (pre, aggregate), (logits, sinkhorns[0]))
    if not all(_only_feeds([value], reader, views) for value, reader in readers):
        return None
    return dict(project=project, scale=scale, sinkhorn=sinkhorns[0], aggregate=aggregate, p=p, s=s, k=k, a=a,
                post=scale_out[1], dead=[aggregate, *_view_chain(a["x"]), sinkhorns[0], *views,
                                         *(g for r in scale_out for g in r), scale, h, ms, project])


def _pre_chain_reads(p, s, k, a, results):
    """Whether scale reads project's h and ms, sinkhorn scale's logits,
    aggregate scale's pre and project's x (each through views, in its shape)."""
    h, ms, pre, logits = results
    return (_reads(s["h"], h) and _reads(s["ms"], ms) and _reads(a["pre"], pre) and _reads(k["logits"], logits)
            and _source(a["x"]) is _source(p["x"]) and _shape(a["x"]) == _shape(p["x"]) is not None)


def _pre_chain_attrs(c):
    """The pre step's attributes from the four ops, or None unless they are
    constants and agree on n and layout."""
    p, s, k, a = c["p"], c["s"], c["k"], c["a"]
    attrs = dict(n=p["n"], layout=p["layout"], tf32=p["tf32"], norm_eps=s["norm_eps"], pre_eps=s["pre_eps"],
                 post_mult=s["post_mult"], mode=k["mode"], iters=k["iters"], eps=k["eps"])
    if not _constants(*attrs.values(), s["n"], k["n"], a["n"], a["layout"]):
        return None
    if not (s["n"] == k["n"] == a["n"] == attrs["n"] and a["layout"] == attrs["layout"]):
        return None
    return attrs


def _match_pre_chain(aggregate):
    """The chain ending in `aggregate` (a dict for _fuse_pre_chain), or None
    where it must stay four ops: the pattern, one parameter dtype, the
    pre-step rule, and no write in place among the four."""
    c = _pre_chain_nodes(aggregate)
    attrs = _pre_chain_attrs(c) if c else None
    if attrs is None:
        return None
    p, s = c["p"], c["s"]
    if not _one_param_dtype(p["phi"], p["weight"], s["alpha"], s["beta"]) or _value(p["x"]) is None:
        return None
    if not _pre_step_fuses(attrs["n"], p["x"]):
        return None
    chain = sorted((c["project"], c["scale"], c["sinkhorn"], aggregate), key=_position(aggregate.graph))
    if not _no_mutation_between(chain[0], chain[-1]):
        return None
    return dict(c, attrs=attrs, last=chain[-1], inputs=(p["x"], p["phi"], s["alpha"], s["beta"], p["weight"]))


def _position(graph):
    order = {node: i for i, node in enumerate(graph.nodes)}
    return order.__getitem__


def _call(graph, after, op, args, values, like):
    """op(*args) after `after` and its results as getitem nodes, with the
    example values `values` (those of the results they replace) and `like`'s
    stack trace."""
    with graph.inserting_after(after):
        fused = graph.call_function(op, tuple(args))
    results = []
    for i, value in enumerate(values):
        with graph.inserting_after(results[-1] if results else fused):
            results.append(graph.call_function(operator.getitem, (fused, i)))
        if value is not None:
            results[-1].meta["example_value"] = value
    if all(v is not None for v in values):
        fused.meta["example_value"] = tuple(values)
    for key in ("stack_trace", "nn_module_stack", "source_fn_stack"):
        if key in like.meta:
            fused.meta[key] = like.meta[key]
    return results


def _erase_dead(graph, nodes):
    """Erases those of `nodes` that nothing uses any more (until none is left
    that became unused by an erase)."""
    left = list(dict.fromkeys(nodes))
    while True:
        dead = [node for node in left if not node.users]
        if not dead:
            return
        for node in dead:
            graph.erase_node(node)
        left = [node for node in left if node not in dead]


def _replace(old_nodes, new):
    for old in old_nodes:
        old.replace_all_uses_with(new)


def _fuse_pre_chain(graph, chain):
    a = chain["attrs"]
    args = (*chain["inputs"], a["n"], a["layout"], a["tf32"], a["norm_eps"], a["pre_eps"], a["post_mult"],
            a["mode"], a["iters"], a["eps"])
    scale_value = _value(chain["scale"])  # (pre, post, logits)
    values = [_value(chain["aggregate"]), scale_value[1] if isinstance(scale_value, tuple) else None,
              _value(chain["sinkhorn"])]
    y, post, P = _call(graph, chain["last"], _MHC.pre.default, args, values, chain["aggregate"])
    chain["aggregate"].replace_all_uses_with(y)
    _replace(chain["post"], post)
    chain["sinkhorn"].replace_all_uses_with(P)
    _erase_dead(graph, chain["dead"])


# --- the seam -------------------------------------------------------------------

_PRE_ATTRS = ("n", "layout", "tf32", "norm_eps", "pre_eps", "post_mult", "mode", "iters", "eps")


def _match_seam(combine):
    """(pre node, its results, bound args) of the pre step that reads combine's
    x_next, if the two can become one post_pre; else None."""
    c = _bind(combine)
    if c is None or not _constants(c["n"], c["layout"]):
        return None
    for user in _users_through_views(combine):
        if not _is(user, _MHC.pre):
            continue
        p, results = _bind(user), _results(user, 3)
        if p is None or results is None or not _reads(p["x"], combine):
            continue
        if not _constants(*(p[k] for k in _PRE_ATTRS)) or (p["n"], p["layout"]) != (c["n"], c["layout"]):
            continue
        if not _one_param_dtype(c["bias"], p["phi"], p["alpha"], p["beta"], p["weight"]):
            continue
        if _value(c["x"]) is None or not _pre_step_fuses(p["n"], c["x"]):
            continue
        if not _no_mutation_between(combine, user):
            continue
        return user, results, c, p
    return None


def _users_through_views(node):
    """node's users, those behind views included, in graph order."""
    found, stack = [], [node]
    while stack:
        for user in stack.pop().users:
            if _is_view(user):
                stack.append(user)
            else:
                found.append(user)
    return sorted(set(found), key=_position(node.graph))


def _fuse_seam(graph, combine, match):
    pre, results, c, p = match
    args = (c["f"], c["post"], c["x"], c["P"], c["bias"], p["phi"], p["alpha"], p["beta"], p["weight"],
            *(p[k] for k in _PRE_ATTRS))
    pre_value = _value(pre)
    values = [_value(combine), *(pre_value if isinstance(pre_value, tuple) else (None,) * 3)]
    x_next, *pre_results = _call(graph, pre, _MHC.post_pre.default, args, values, pre)
    for old, new in zip(results, pre_results):
        _replace(old, new)
    views = _views_of(combine)
    combine.replace_all_uses_with(x_next)
    _erase_dead(graph, [*(g for r in results for g in r), pre, *views, combine])


def _views_of(node):
    """The view nodes behind node (views of views included)."""
    views, stack = [], [node]
    while stack:
        for user in stack.pop().users:
            if _is_view(user):
                views.append(user)
                stack.append(user)
    return views


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
