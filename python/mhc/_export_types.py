"""MLIR text for mhc.export: tensor types, their element types and f32
literals (shared by the graph emitter, _export_graph.py, and the mhc ops'
forms, _export_ops.py)."""

import struct

import torch

_ELEMENT_TYPES = {
    torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16", torch.float64: "f64",
    torch.int64: "i64", torch.int32: "i32", torch.int16: "i16", torch.int8: "i8", torch.uint8: "ui8",
    torch.bool: "i1",
}


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

def _shape(type_):
    """(dims, element type) of a tensor type as written: (['?', '4', '64'], 'bf16')."""
    parts = type_[len("tensor<"):-1].split("x")
    return parts[:-1], parts[-1]


def _tensor(dims, element):
    return "tensor<" + "".join(f"{d}x" for d in dims) + element + ">"
