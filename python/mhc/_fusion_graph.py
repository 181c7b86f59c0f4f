"""Reading a Dynamo graph for the fusion under torch.compile (compile_fusion.py):
which mhc op a node calls and with which arguments, the tensors behind views,
who reads a value and whether anything between two ops may write it."""

import operator

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
