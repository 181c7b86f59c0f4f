"""The fusion's rewrites (compile_fusion.py): a pre-step chain (project ->
scale -> sinkhorn -> aggregate) into torch.ops.mhc.pre, and an expand_combine
feeding a pre step into torch.ops.mhc.post_pre: matching, then replacing."""

import operator

from ._fusion_graph import (
    _MHC,
    _bind,
    _constants,
    _is,
    _is_view,
    _no_mutation_between,
    _one_param_dtype,
    _only_feeds,
    _pre_step_fuses,
    _producer,
    _reads,
    _results,
    _shape,
    _source,
    _value,
    _view_chain)

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
