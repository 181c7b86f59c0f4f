"""mhc.export's graph emitter: one FX graph as `func.func @<name>` in MLIR
text, each mhc op in its dialect form (_export_ops.py) and each run of
other nodes as a call to an opaque private function."""

import collections
import operator
import re

import torch

from ._export_ops import _MHC_OPS
from ._export_types import _value_type

# Ops whose result is their operand's elements reshaped (a chain of them back to
# the operand's type is the operand), and ops that only move data or compute
# sizes (a run is named after the module of its other ops).
_VIEWS = {"view", "reshape", "_unsafe_view", "alias", "contiguous", "clone", "flatten", "unflatten", "squeeze",
          "unsqueeze"}
_DATA_MOVES = _VIEWS | {"slice", "expand", "permute", "transpose", "t", "select", "split", "chunk", "unbind",
                        "sym_size", "getitem", "mul", "add", "floordiv"}
# Gradient ops whose results are summed with aten.add into x's gradient.
_GRAD_OPS = {"project_backward", "aggregate_backward", "expand_combine_backward", "pre_backward", "post_pre_backward"}


def _is_mhc(node):
    return node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload) \
        and node.target.namespace == "mhc"


def _aten_name(node):
    """'reshape' for aten.reshape.default, 'mul' for operator.mul ('' for others)."""
    target = node.target
    schema = getattr(target, "_schema", None)
    if schema is not None:
        return schema.name.split("::")[1] if schema.name.startswith("aten::") else ""
    return getattr(target, "__name__", "")


def _op_name(node):
    return node.target._schema.name.split("::")[1]


def _schema_args(node):
    """The op's arguments in schema order, defaults filled in."""
    out = []
    for i, a in enumerate(node.target._schema.arguments):
        if i < len(node.args):
            out.append(node.args[i])
        elif a.name in node.kwargs:
            out.append(node.kwargs[a.name])
        else:
            out.append(a.default_value)
    return out


def _symbol(text):
    s = re.sub(r"[^A-Za-z0-9_]", "_", text)
    return s if re.match(r"[A-Za-z_]", s) else "_" + s

class _Emitter:
    """Writes one FX graph as `func.func @<name>` and its opaque declarations."""

    def __init__(self, graph, arg_names, name="forward", prefix="", known_aliases=()):
        self.graph, self.arg_names, self.name, self.prefix = graph, arg_names, name, prefix
        self.known_aliases = set(known_aliases)  # a first pass's aliases, met later in program order
        self.values = {}       # FX node -> its SSA name (a tuple of them for an mhc op's results)
        self.types = {}        # SSA name -> MLIR type
        self.body, self.decls = [], []
        self.regions = 0
        self.views = {}       # (viewed node, type) -> the SSA name: views made twice are one
        self.aliases = set()  # view nodes bound to the value they view (they use nothing of a run)
        self.used = set()      # SSA names given out

    # -- values --------------------------------------------------------------
    def ssa(self, hint, type_):
        """A new SSA name from `hint` (the FX node's name, or the op's and its result's)."""
        name, k = "%" + _symbol(hint), 1
        while name in self.used:
            k += 1
            name = f"%{_symbol(hint)}_{k}"
        self.used.add(name)
        self.types[name] = type_
        return name

    def value(self, node):
        if node not in self.values:
            raise ValueError(f"mhc.export: value {node} is used before it is defined")
        return self.values[node]

    def bind(self, node, name):
        self.values[node] = name

    # -- the graph -----------------------------------------------------------
    def emit(self):
        nodes = list(self.graph.nodes)
        # User inputs first, then parameters, buffers and constants (as in examples/*.mlir).
        placeholders = sorted((n for n in nodes if n.op == "placeholder"), key=lambda n: n.name in self.arg_names)
        args = [self.argument(n) for n in placeholders]
        run = []
        for node in nodes:
            if node.op == "placeholder":
                continue
            if node.op == "output":
                self.opaque(run)
                run = []
                results = self.returned(node)
                continue
            if self.is_alias(node):
                continue
            if _is_mhc(node):
                self.opaque(run)
                run = []
                self.mhc_op(node)
            elif self.is_grad_add(node):
                self.opaque(run)
                run = []
                self.add(node)
            elif node.op == "call_function":
                run.append(node)
            else:
                raise ValueError(f"mhc.export: cannot export {node.op} node {node.format_node()}")
        signature = ",\n    ".join(args)
        result_types = ", ".join(self.types[r] for r in results)
        lines = [f"func.func @{self.name}({signature}) -> ({result_types}) {{"]
        lines += ["  " + line for line in self.body]
        lines.append(f"  return {', '.join(results)} : {result_types}" if results else "  return")
        lines.append("}")
        return self.decls, lines

    def argument(self, node):
        type_ = _value_type(node.meta.get("val"))
        if type_ is None:
            raise ValueError(f"mhc.export: input {node.name} is not a tensor or a number")
        name = self.ssa(node.name, type_)
        self.bind(node, name)
        source = self.arg_names.get(node.name)
        attrs = f' {{mhc.name = "{source}"}}' if source else ""
        return f"{name}: {type_}{attrs}"

    def returned(self, node):
        flat = torch.utils._pytree.tree_leaves(node.args[0])
        out = []
        for v in flat:
            if isinstance(v, torch.fx.Node):
                out.append(self.value(v))
            elif v is not None:
                raise ValueError(f"mhc.export: the model returns a constant ({v!r}); only tensors are exported")
        return out

    # -- aliases: getitem of an mhc op, views that change nothing ------------
    def is_alias(self, node):
        if node.op != "call_function":
            return False
        if node.target is operator.getitem:
            source = node.args[0]
            if source in self.values and isinstance(self.values[source], tuple):
                self.bind(node, self.values[source][node.args[1]])
                return True
            return False
        root = self.view_root(node)
        if root is None:
            return False
        self.bind(node, root)
        self.aliases.add(node)
        key = self.view_of(node)
        if key:
            self.views.setdefault(key, root)
        return True

    def view_root(self, node):
        """The value `node` equals when it only views it back in its own
        shape: a chain of numel-preserving views (reshape, view, unflatten,
        ...) from a defined value of the same type, with at most one dynamic
        dim (so the same numel means the same shape), or a no-op slice."""
        type_ = _value_type(node.meta.get("val"))
        if type_ is None or type_.count("?") > 1:
            return None
        same = self.view_of(node)
        if same in self.views:  # the same view of the same value, made again
            return self.views[same]
        first = True
        while node.op == "call_function" and _aten_name(node) in _VIEWS | ({"slice", "expand"} if first else set()):
            node, first = node.args[0], False
            if not isinstance(node, torch.fx.Node):
                return None
            name = self.values.get(node)
            if isinstance(name, str) and self.types[name] == type_:
                return name
        return None

    @staticmethod
    def view_of(node):
        """(viewed node, type) of a view node, the key of views made twice."""
        if node.op != "call_function" or _aten_name(node) not in _VIEWS or not node.args:
            return None
        type_ = _value_type(node.meta.get("val"))
        if not isinstance(node.args[0], torch.fx.Node) or not type_ or type_.count("?") > 1:
            return None
        return node.args[0], type_

    # -- opaque runs -----------------------------------------------------------
    def opaque(self, run):
        """One call for a run of non-mhc nodes: operands are the values it
        uses from outside, results the values used after it."""
        if not run:
            return
        inside = set(run)

        def used_after(n):
            return any(u not in inside and u not in self.aliases and u not in self.known_aliases for u in n.users)

        results = [n for n in run if used_after(n) and _value_type(n.meta.get("val"))]
        for node in run:
            if node not in results and used_after(node):
                raise ValueError(f"mhc.export: {node.format_node()} gives a value that is not a tensor or a "
                                 "number to a later part of the graph")
        if not results:
            return  # nothing it computes is used (asserts, dead code)
        run = self.needed(run, results)
        inside = set(run)
        operands = []
        for node in run:
            for used in node.all_input_nodes:
                if used not in inside and used not in operands:
                    operands.append(used)
        self.regions += 1
        symbol = f"{self.prefix}{_symbol(self.region_module(run))}_{self.regions}"
        in_names = [self.value(u) for u in operands]
        if any(isinstance(v, tuple) for v in in_names):
            raise ValueError("mhc.export: an opaque part uses an mhc op's results as one value")
        in_types = [self.types[v] for v in in_names]
        out_types = [_value_type(n.meta["val"]) for n in results]
        out_names = [self.ssa(n.name, t) for n, t in zip(results, out_types)]
        for n, name in zip(results, out_names):
            self.bind(n, name)
        for n in results:  # a later identical view of the same value is this one
            key = self.view_of(n)
            if key:
                self.views.setdefault(key, self.values[n])
        ops = collections.Counter(_aten_name(n) or str(n.target) for n in run)
        summary = ", ".join(f"{op}" + (f" x{k}" if k > 1 else "") for op, k in ops.items())
        self.decls.append(f"// {self.region_module(run) or 'the model'}: {summary}")
        self.decls.append(f"func.func private @{symbol}({', '.join(in_types)}) -> ({', '.join(out_types)})")
        lhs = f"{', '.join(out_names)} = "
        self.body.append(f"{lhs}func.call @{symbol}({', '.join(in_names)}) : "
                         f"({', '.join(in_types)}) -> ({', '.join(out_types)})")

    @staticmethod
    def needed(run, results):
        """The run's nodes that its results depend on, in order (views of
        mhc results that only aliases used are dropped)."""
        inside, keep, stack = set(run), set(), list(results)
        while stack:
            node = stack.pop()
            if node in keep:
                continue
            keep.add(node)
            stack += [u for u in node.all_input_nodes if u in inside]
        return [n for n in run if n in keep]

    @staticmethod
    def region_module(run):
        """The innermost module that holds every node of the run that computes
        (not only moves data; 'model' for the top level)."""
        computing = [n for n in run if _aten_name(n) not in _DATA_MOVES] or run
        paths = []
        for node in computing:
            stack = node.meta.get("nn_module_stack") or {}
            fqn = list(stack.values())[-1][0] if stack else ""
            fqn = "" if fqn.startswith("_empty_nn_module_stack") else fqn  # torch.export's name for none
            paths.append([p for p in fqn.split(".") if p])
        common = paths[0]
        for p in paths[1:]:
            k = 0
            while k < min(len(common), len(p)) and common[k] == p[k]:
                k += 1
            common = common[:k]
        return ".".join(common) or "model"

    # -- the adds of x's gradient contributions --------------------------------
    def is_grad_add(self, node):
        if node.op != "call_function" or node.target is not torch.ops.aten.add.Tensor or len(node.args) != 2:
            return False
        if node.kwargs.get("alpha", 1) != 1:
            return False
        a, b = node.args
        return all(isinstance(v, torch.fx.Node) and self.is_grad_value(v) for v in (a, b)) and \
            _value_type(a.meta.get("val")) == _value_type(b.meta.get("val")) == _value_type(node.meta.get("val"))

    def is_grad_value(self, node):
        if node.target is operator.getitem:
            node = node.args[0]
        if _is_mhc(node):
            return _op_name(node) in _GRAD_OPS
        return self.is_grad_add(node) if node.op == "call_function" else False

    def add(self, node):
        a, b = (self.value(v) for v in node.args)
        out = self.ssa(node.name, self.types[a])
        self.body.append(f"{out} = arith.addf {a}, {b} : {self.types[a]}")
        self.bind(node, out)

    # -- mhc ops ---------------------------------------------------------------
    def mhc_op(self, node):
        op = _op_name(node)
        if op not in _MHC_OPS:
            raise ValueError(f"mhc.export: no dialect form for torch.ops.mhc.{op}")
        self.current = node.name
        args = [self.value(a) if isinstance(a, torch.fx.Node) else a for a in _schema_args(node)]
        results = _MHC_OPS[op](self, *args)
        self.bind(node, results)

    def op(self, results, text, operands, attrs):
        """Appends `results = text : (operand types) -> (result types)`;
        `results` are (suffix, type) pairs; returns their SSA names."""
        names = [self.ssa(f"{self.current}_{suffix}", t) for suffix, t in results]
        types = [t for _, t in results]
        in_types = ", ".join(self.types[o] for o in operands if o is not None)
        out_types = types[0] if len(types) == 1 else "(" + ", ".join(types) + ")"
        self.body.append(f"{', '.join(names)} = {text} {{{attrs}}} : ({in_types}) -> {out_types}")
        return names
