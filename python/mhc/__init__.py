"""mhc: Manifold-Constrained Hyper-Connections with generated GPU kernels.

    import mhc
    y, post, P = mhc.pre(x, phi, alpha, beta)             # project+scale+sinkhorn+aggregate
    x_next = mhc.post(block(y), post, x, P)               # expand_combine
    x_next, y, post, P = mhc.post_pre(f, post, x, P, phi, alpha, beta)  # post, then the next pre
    layer = mhc.HyperConnection(n=4, C=2048)              # an nn.Module around a block
    stack = mhc.HyperConnectionStack(blocks, n=4, C=2048) # blocks with mHC, fused seams
    mhc.inference.post_pre(f, post, x, P, phi, alpha, beta, out=outs)  # into preallocated outputs

The ops are torch.ops.mhc.*: CUDA tensors run kernels specialised for their
(op, n, dtype, layout, C, arch), compiled on first use and cached on disk
(~/.cache/mhc, or $MHC_CACHE_DIR); CPU tensors run the ATen reference, and
CUDA cases the kernels do not cover fall back to it with a one-time warning
naming the reason. MHC_FORCE_REFERENCE=1
forces the reference everywhere; MHC_LOG=1 logs specialisations, compiles and
cache hits. Prebuilt kernel bundles (`mhc precompile`) are used before the
cache and the compiler: MHC_BUNDLE_PATH=dir1:dir2 or mhc.load_bundle(dir).
"""

import os as _os

import torch as _torch

_bundled = _os.path.join(_os.path.dirname(__file__), "bin", "mhc-compile")
if "MHC_COMPILER" not in _os.environ and _os.path.exists(_bundled):
    _os.environ["MHC_COMPILER"] = _bundled

from . import _C  # noqa: E402,F401  (registers torch.ops.mhc.* and their autograd)
from . import _registry  # noqa: E402,F401  (fake kernels; autograd is in C++, Autograd.cpp)
from .ops import (  # noqa: E402,F401
    project, scale, sinkhorn, aggregate, expand_combine, pre, post, post_pre,
)
from .module import HyperConnection, HyperConnectionStack  # noqa: E402,F401
from . import inference  # noqa: E402,F401  (the forward into preallocated outputs: mhc.inference)
from .compile_fusion import compile_backend, compile_stats, enable_compile_fusion, reset_compile_stats  # noqa: E402,F401,E501
from .te import (  # noqa: E402,F401
    mhc_fused_projection, mhc_fused_scale, mhc_fused_sinkhorn,
    mhc_fused_aggregate, mhc_fused_expand_combine, mhc_generate_mix_and_aggregate,
)

__version__ = "0.1.0"


def load_bundle(directory):
    """Uses the kernel bundle in `directory` (written by `mhc precompile`,
    `mhc-compile -o` or `mhc-opt --mhc-write-bundle`) before the cache and the
    compiler, after MHC_BUNDLE_PATH's. Returns the number of kernels it lists;
    each is verified (checksums, manifest, spec) when first used. Raises
    ValueError when `directory` holds no valid bundle index."""
    path = _os.path.abspath(_os.fspath(directory))
    try:
        return _C.load_bundle(path)
    except RuntimeError as e:
        raise ValueError(f"mhc.load_bundle(directory={str(directory)!r}): {e}") from None
