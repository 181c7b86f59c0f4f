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
import os

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from . import _C
from ._export_graph import _Emitter


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
