"""A PyTorch model's graph in the mhc dialect, for mhc-opt (issue 37, part 1).

    import mhc.export
    mhc.export.export(model, (tokens,), "model.mlir")          # or: mhc export ...
    mhc-opt model.mlir --mhc-expand-layers --canonicalize --cse --mhc-fuse-pre \
        --mhc-fuse-layers --mhc-specialize=arch=sm_90a --mhc-report-kernels

torch.export captures the model; this module writes its graph as one
`func.func @forward` in MLIR text (docs/ARCHITECTURE.md says why not through
torch-mlir): user inputs, then every parameter, buffer and lifted constant as
arguments (`mhc.name` holds the parameter's name); each torch.ops.mhc.* call
as the mhc ops it computes (the fused torch ops as their parts: `pre` as
project, scale, sinkhorn, aggregate; `post_pre` as expand_combine and the pre
step; `pre_backward` as the four gradient ops and `post_pre_backward` as the
five, x's gradients summed through their acc operands, so that mhc-fuse-pre and mhc-fuse-layers decide
where to fuse by the rules the runtime follows); and each run of other nodes between two mhc
ops (attention, MLP, embeddings, norms) as one call to an opaque private
function whose operands and results are the run's live values, in program
order. Token dims are dynamic (`?`) with `dynamic_tokens`.

record_specs() runs the model on CPU and lists the kernel specs the CUDA
path would request (mhc._C.requested_specs, runtime/torch/SpecOf.cpp).
"""

import collections
import operator
import os
import re
import struct

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from . import _C

_ELEMENT_TYPES = {
    torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16", torch.float64: "f64",
    torch.int64: "i64", torch.int32: "i32", torch.int16: "i16", torch.int8: "i8", torch.uint8: "ui8",
    torch.bool: "i1",
}
# Ops whose result is their operand's elements reshaped (a chain of them back to
# the operand's type is the operand), and ops that only move data or compute
# sizes (a run is named after the module of its other ops).
_VIEWS = {"view", "reshape", "_unsafe_view", "alias", "contiguous", "clone", "flatten", "unflatten", "squeeze",
          "unsqueeze"}
_DATA_MOVES = _VIEWS | {"slice", "expand", "permute", "transpose", "t", "select", "split", "chunk", "unbind",
                        "sym_size", "getitem", "mul", "add", "floordiv"}
# Gradient ops whose results are summed with aten.add into x's gradient.
_GRAD_OPS = {"project_backward", "aggregate_backward", "expand_combine_backward", "pre_backward", "post_pre_backward"}


def _f32(v):
    """v as MLIR's f32 literal: the float32 value, 10 significant digits (exact)."""
    return f"{struct.unpack('f', struct.pack('f', float(v)))[0]:.9e} : f32"


def _tensor_type(t):
    if t.dtype not in _ELEMENT_TYPES:
        raise ValueError(f"mhc.export: no MLIR element type for {t.dtype}")
    return _tensor([d if isinstance(d, int) else "?" for d in map(_static, t.shape)], _ELEMENT_TYPES[t.dtype])


def _static(d):
    """d as an int where it is one; a symbolic size stays a SymInt (`?`)."""
    if isinstance(d, torch.SymInt):
        return d.node.maybe_as_int() if d.node.is_constant() else d
    return int(d)


def _value_type(v):
    """The MLIR type of an FX value (meta['val']), or None for one without."""
    if isinstance(v, torch.Tensor):
        return _tensor_type(v)
    if isinstance(v, (torch.SymInt, int)) and not isinstance(v, bool):
        return "index"
    if isinstance(v, (torch.SymBool, bool)):
        return "i1"
    if isinstance(v, (torch.SymFloat, float)):
        return "f64"
    return None


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


def _shape(type_):
    """(dims, element type) of a tensor type as written: (['?', '4', '64'], 'bf16')."""
    parts = type_[len("tensor<"):-1].split("x")
    return parts[:-1], parts[-1]


def _tensor(dims, element):
    return "tensor<" + "".join(f"{d}x" for d in dims) + element + ">"


def _opt(keyword, name):
    return f" {keyword} {name}" if name else ""


class _Attrs:
    """The dialect's attribute dictionaries, from the torch ops' arguments."""

    @staticmethod
    def scale(n, norm_eps, pre_eps, post_mult):
        return (f"n = {n} : i64, norm_eps = {_f32(norm_eps)}, pre_eps = {_f32(pre_eps)}, "
                f"post_mult = {_f32(post_mult)}")

    @staticmethod
    def sinkhorn(n, iters, eps, mode):
        return f"n = {n} : i64, iters = {iters} : i64" + (f", eps = {_f32(eps)}" if mode == "softmax_eps" else "")

    @staticmethod
    def project(n, tf32):
        return f"n = {n} : i64" + (", tf32" if tf32 else "")


def _streams(e, x, layout):
    """(M, C, activation element type, mixing element type) of streams x."""
    dims, element = _shape(e.types[x])
    return dims[0], dims[2] if layout == "nc" else dims[1], element, "f64" if element == "f64" else "f32"


# Each helper takes SSA names (None for an absent optional tensor) and the
# torch op's other arguments, appends the dialect op(s) and returns the
# result names in the torch op's order.

def _project(e, x, phi, weight, n, layout, tf32):
    M, _, _, mix = _streams(e, x, layout)
    return tuple(e.op([("h", _tensor([M, _C.num_logits(n)], mix)), ("ms", _tensor([M], mix))],
                      f"mhc.project {layout} {x}, {phi}{_opt('weight', weight)}", [x, phi, weight],
                      _Attrs.project(n, tf32)))


def _scale(e, h, ms, alpha, beta, n, norm_eps, pre_eps, post_mult):
    (M, _), mix = _shape(e.types[h])
    vec, mat = _tensor([M, n], mix), _tensor([M, n, n], mix)
    return tuple(e.op([("pre", vec), ("post", vec), ("logits", mat)], f"mhc.scale {h}, {ms}, {alpha}, {beta}",
                      [h, ms, alpha, beta], _Attrs.scale(n, norm_eps, pre_eps, post_mult)))


def _sinkhorn(e, logits, n, mode, iters, eps):
    return e.op([("P", e.types[logits])], f"mhc.sinkhorn {mode} {logits}", [logits],
                _Attrs.sinkhorn(n, iters, eps, mode))[0]


def _aggregate(e, x, pre, n, layout):
    M, C, act, _ = _streams(e, x, layout)
    return e.op([("y", _tensor([M, C], act))], f"mhc.aggregate {layout} {x}, {pre}", [x, pre], f"n = {n} : i64")[0]


def _expand_combine(e, f, post, x, P, bias, n, layout):
    return e.op([("x_next", e.types[x])], f"mhc.expand_combine {layout} {f}, {post}, {x}, {P}{_opt('bias', bias)}",
                [f, post, x, P, bias], f"n = {n} : i64")[0]


def _pre_saved(e, x, phi, alpha, beta, weight, n, layout, tf32, norm_eps, pre_eps, post_mult, mode, iters, eps):
    """The pre step as its four ops: (y, post, P, h, ms, pre, logits)."""
    h, ms = _project(e, x, phi, weight, n, layout, tf32)
    pre, post, logits = _scale(e, h, ms, alpha, beta, n, norm_eps, pre_eps, post_mult)
    P = _sinkhorn(e, logits, n, mode, iters, eps)
    return _aggregate(e, x, pre, n, layout), post, P, h, ms, pre, logits


def _post_pre_saved(e, f, post, x, P, bias, phi, alpha, beta, weight, n, layout, *pre_attrs):
    """expand_combine, then the pre step of x_next: the contract's eight
    results (x_next, h, ms, pre, post_next, logits, P_next, y)."""
    x_next = _expand_combine(e, f, post, x, P, bias, n, layout)
    y, post_next, P_next, h, ms, pre, logits = _pre_saved(e, x_next, phi, alpha, beta, weight, n, layout, *pre_attrs)
    return x_next, h, ms, pre, post_next, logits, P_next, y


def _post_pre(e, *args):
    x_next, _, _, _, post_next, _, P_next, y = _post_pre_saved(e, *args)
    return x_next, y, post_next, P_next


# The backward ops' optional `acc` (x's gradient from its other users, summed
# in the kernel) is the dialect ops' `acc` operand.

def _project_grad(e, gh, gms, x, phi, weight, n, layout, tf32, acc=None):
    results = [("gx", e.types[x]), ("gphi", e.types[phi])] + ([("gweight", e.types[weight])] if weight else [])
    out = e.op(results, f"mhc.project_grad {layout} {gh}, {gms}, {x}, {phi}{_opt('weight', weight)}{_opt('acc', acc)}",
               [gh, gms, x, phi, weight, acc], _Attrs.project(n, tf32))
    return out[0], out[1], out[2] if weight else None


def _scale_grad(e, gpre, gpost, glogits, h, ms, alpha, beta, n, norm_eps, pre_eps, post_mult):
    operands = [gpre, gpost, glogits, h, ms, alpha, beta]
    return tuple(e.op([("gh", e.types[h]), ("gms", e.types[ms]), ("galpha", e.types[alpha]),
                       ("gbeta", e.types[beta])], "mhc.scale_grad " + ", ".join(operands), operands,
                      _Attrs.scale(n, norm_eps, pre_eps, post_mult)))


def _sinkhorn_grad(e, gP, logits, n, mode, iters, eps):
    return e.op([("glogits", e.types[logits])], f"mhc.sinkhorn_grad {mode} {gP}, {logits}", [gP, logits],
                _Attrs.sinkhorn(n, iters, eps, mode))[0]


def _aggregate_grad(e, gy, x, pre, n, layout, acc=None):
    return tuple(e.op([("gx", e.types[x]), ("gpre", e.types[pre])],
                      f"mhc.aggregate_grad {layout} {gy}, {x}, {pre}{_opt('acc', acc)}", [gy, x, pre, acc],
                      f"n = {n} : i64"))


def _expand_combine_grad(e, gout, f, post, x, P, bias, n, layout, acc=None):
    results = [("gf", e.types[f]), ("gpost", e.types[post]), ("gx", e.types[x]), ("gP", e.types[P])]
    results += [("gbias", e.types[bias])] if bias else []
    out = e.op(results, f"mhc.expand_combine_grad {layout} {gout}, {f}, {post}, {x}, {P}{_opt('bias', bias)}"
               f"{_opt('acc', acc)}", [gout, f, post, x, P, bias, acc], f"n = {n} : i64")
    return tuple(out[:4]) + (out[4] if bias else None,)


def _post_pre_grad(e, gx_next, gy, gpost_next, gP_next, f, post, x, P, bias, x_next, h, ms, pre, logits, phi,
                   alpha, beta, weight, n, layout, tf32, norm_eps, pre_eps, post_mult, mode, iters, eps):
    """The seam's gradient as the ops it replaces, x_next's gradients summed
    through acc (seam.md, SeamOps.cpp's seamGradSteps): (gx, gf, gpost, gP,
    gbias, gphi, galpha, gbeta, gweight)."""
    g1, gpre = _aggregate_grad(e, gy, x_next, pre, n, layout, acc=gx_next)
    glogits = _sinkhorn_grad(e, gP_next, logits, n, mode, iters, eps)
    gh, gms, galpha, gbeta = _scale_grad(e, gpre, gpost_next, glogits, h, ms, alpha, beta, n, norm_eps, pre_eps,
                                         post_mult)
    g, gphi, gweight = _project_grad(e, gh, gms, x_next, phi, weight, n, layout, tf32, acc=g1)
    gf, gpost, gx, gP, gbias = _expand_combine_grad(e, g, f, post, x, P, bias, n, layout)
    return gx, gf, gpost, gP, gbias, gphi, galpha, gbeta, gweight


def _pre_grad(e, gy, gpost, gP, x, h, ms, pre, logits, phi, alpha, beta, weight, acc, n, layout, tf32, norm_eps,
              pre_eps, post_mult, mode, iters, eps):
    """The pre step's gradient as the ops pre.bwd replaces, aggregate's gx
    as project's acc (PreBackwardOps.cpp's preGradSteps): (gx, gphi,
    galpha, gbeta, gweight). An acc of another type than x (TE's f32
    buffer) has no dialect form, as aggregate_backward_into has none."""
    if acc is not None and e.types[acc] != e.types[x]:
        raise ValueError("mhc.export: no dialect form for torch.ops.mhc.pre_backward with an f32 acc "
                         "(TE's fused_grad_x_acc_buffer) on x of another dtype")
    g1, gpre = _aggregate_grad(e, gy, x, pre, n, layout, acc=acc)
    glogits = _sinkhorn_grad(e, gP, logits, n, mode, iters, eps)
    gh, gms, galpha, gbeta = _scale_grad(e, gpre, gpost, glogits, h, ms, alpha, beta, n, norm_eps, pre_eps,
                                         post_mult)
    gx, gphi, gweight = _project_grad(e, gh, gms, x, phi, weight, n, layout, tf32, acc=g1)
    return gx, gphi, galpha, gbeta, gweight


_MHC_OPS = {
    "project": _project,
    "scale": _scale,
    "sinkhorn": _sinkhorn,
    "aggregate": _aggregate,
    "expand_combine": _expand_combine,
    "pre": lambda e, *a: _pre_saved(e, *a)[:3],
    "pre_saved": _pre_saved,
    "post_pre": _post_pre,
    "post_pre_saved": _post_pre_saved,
    "project_backward": _project_grad,
    "scale_backward": _scale_grad,
    "sinkhorn_backward": _sinkhorn_grad,
    "aggregate_backward": _aggregate_grad,
    "expand_combine_backward": _expand_combine_grad,
    "pre_backward": _pre_grad,
    "post_pre_backward": _post_pre_grad,
}


def _arg_names(ep):
    """Placeholder name -> the parameter/buffer/constant name it holds."""
    names = {}
    for spec in ep.graph_signature.input_specs:
        if spec.target is not None and hasattr(spec.arg, "name"):
            names[spec.arg.name] = spec.target
    return names


def capture(model, example_inputs, *, dynamic_tokens=True):
    """torch.export of `model`, dim 0 (tokens) of every tensor input dynamic
    with `dynamic_tokens` (Dim.AUTO: export keeps it static where the model
    fixes it)."""
    if isinstance(model, torch.export.ExportedProgram):
        return model
    example_inputs = tuple(example_inputs)
    shapes = _token_shapes(example_inputs) if dynamic_tokens else None
    return torch.export.export(model, example_inputs, dynamic_shapes=shapes)


def _token_shapes(example_inputs):
    return tuple({0: torch.export.Dim.AUTO} if isinstance(a, torch.Tensor) and a.dim() else None
                 for a in example_inputs)


def _emit(ep, name, prefix=""):
    """(declarations, function) of the graph. A view that folds into the value
    it views uses nothing of the run before it; which views fold is known
    only after a pass, so passes repeat until it is the same twice (a run
    whose value only such a view uses later then does not return it); the
    first pass, which assumes none, is the fallback."""
    graph, names = ep.graph_module.graph, _arg_names(ep)
    first = _Emitter(graph, names, name, prefix)
    result = first.emit()
    known = first.aliases
    for _ in range(4):
        emitter = _Emitter(graph, names, name, prefix, known)
        try:
            emitted = emitter.emit()
        except ValueError:
            break
        if emitter.aliases == known:
            return emitted
        known = emitter.aliases
    return result


def to_mlir(ep, *, name="forward", header=""):
    """The ExportedProgram's graph as an MLIR module in the mhc dialect (text)."""
    decls, body = _emit(ep, name)
    text = [header.rstrip()] if header else []
    text += decls + [""] + body
    return "\n".join(text) + "\n"


def export(model, example_inputs, path=None, *, backward=False, dynamic_tokens=True):
    """Writes `model`'s graph, called with `example_inputs`, in the mhc
    dialect to `path` (if given) and returns the text. `model` is an
    nn.Module or a torch.export.ExportedProgram. With `backward`, the
    module also holds `@backward`, the gradient graph (see export_backward)."""
    ep = capture(model, example_inputs, dynamic_tokens=dynamic_tokens)
    header = (f"// {type(model).__name__} exported by mhc.export (torch {torch.__version__}); "
              "opaque functions are the model's non-mhc parts.")
    text = to_mlir(ep, header=header)
    if backward:
        text += "\n" + _joint_mlir(model, example_inputs, dynamic_tokens)
    if path is not None:
        with open(os.fspath(path), "w") as f:
            f.write(text)
    return text


class _Loss(nn.Module):
    """The model's outputs summed into one scalar, the loss whose gradient
    @forward_backward computes (as record_specs(backward=True) does)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, *inputs):
        return _sum_outputs(self.model(*inputs))


def _sum_outputs(out):
    return sum(t.float().sum() for t in torch.utils._pytree.tree_leaves(out) if isinstance(t, torch.Tensor))


def _joint_mlir(model, example_inputs, dynamic_tokens):
    """`@forward_backward`: the training step's joint graph (torch.export's
    forward and backward, _export_forward_backward), the loss being the sum of
    the outputs; it returns the loss and the gradients of the parameters and
    of the floating-point inputs. The mhc *_backward ops become the dialect's
    *_grad ops (their acc the ops' acc operand), post_pre_backward its five
    gradient ops, which mhc-fuse-layers folds back into mhc.post_pre_grad; an
    aten.add of two of x's gradients becomes arith.addf, which it makes acc."""
    from torch.export.experimental import _export_forward_backward

    if isinstance(model, torch.export.ExportedProgram):
        model = model.module()
    example_inputs = tuple(example_inputs)
    shapes = (_token_shapes(example_inputs),) if dynamic_tokens else None  # forward(*inputs): one argument
    ep = torch.export.export(_Loss(model), example_inputs, dynamic_shapes=shapes)
    joint = _export_forward_backward(ep, joint_loss_index=0)
    decls, body = _emit(joint, "forward_backward", prefix="bwd_")
    return "\n".join(decls + [""] + body) + "\n"


class _SpecRecorder(TorchDispatchMode):
    """Maps each torch.ops.mhc.* call that reaches a backend kernel to the
    specs its CUDA entry would request (mhc._C.requested_specs)."""

    def __init__(self, arch):
        super().__init__()
        self.arch, self.specs = arch, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func.namespace == "mhc":
            schema = func._schema
            full = [args[i] if i < len(args) else kwargs.get(a.name, a.default_value)
                    for i, a in enumerate(schema.arguments)]
            self.specs += _C.requested_specs(schema.name.split("::")[1], tuple(full), self.arch)
        return func(*args, **kwargs)


def record_specs(model, example_inputs, *, arch="sm_90a", backward=False):
    """The distinct kernel specs (canonical, for `arch`) that running `model`
    on `example_inputs` requests on a CUDA GPU, in order of first request,
    computed on any device: each mhc op call is mapped to what its CUDA entry
    asks for (the same spec builders and fusion decisions, SpecOf.cpp).
    With `backward`, the gradient of the outputs' sum is taken too."""
    recorder = _SpecRecorder(arch)
    with torch.set_grad_enabled(backward), recorder:
        out = model(*example_inputs)
        if backward:
            _sum_outputs(out).backward()
    return list(dict.fromkeys(recorder.specs))
