"""mhc.HyperConnection: one layer's mHC residual path as an nn.Module."""

import math

import torch
from torch import nn

from . import _C, ops


class HyperConnection(nn.Module):
    """Wraps a block (attention or MLP) with mHC.

        hc = mhc.HyperConnection(n=4, C=2048)
        x = hc(x, block)            # x: [..., n, C]; block: [..., C] -> [..., C]

    Parameters follow Megatron's initialisation: phi [2n + n^2, n*C]
    xavier-uniform, alpha = 0.01 (pre, post, res), beta = 0, and the RMSNorm
    weight (when `norm_weight`) ones.
    """

    def __init__(self, n, C, *, layout="nc", norm_weight=True, bias=False, tf32=False, mode="softmax_eps",
                 iters=20, norm_eps=1e-6, pre_eps=1e-6, post_mult=2.0, eps=1e-6, device=None,
                 dtype=torch.float32):
        super().__init__()
        if layout not in ("nc", "cn"):
            raise ValueError(f"layout must be 'nc' or 'cn', got {layout!r}")
        n, C = ops._integer("n", n), ops._integer("C", C)
        if not 1 <= n <= _C.MAX_STREAMS:
            raise ValueError(f"argument 'n' must be >= 1 and <= {_C.MAX_STREAMS}; got {n}")
        if C < 1:
            raise ValueError(f"argument 'C' must be >= 1; got {C}")
        self.n, self.C, self.layout = n, C, layout
        self.options = dict(tf32=tf32, norm_eps=norm_eps, pre_eps=pre_eps, post_mult=post_mult, mode=mode,
                            iters=iters, eps=eps)
        N, K = _C.num_logits(n), n * C
        kw = dict(device=device, dtype=dtype)
        self.phi = nn.Parameter(torch.empty(N, K, **kw))
        self.alpha = nn.Parameter(torch.empty(3, **kw))
        self.beta = nn.Parameter(torch.empty(N, **kw))
        self.norm_weight = nn.Parameter(torch.empty(K, **kw)) if norm_weight else None
        self.bias = nn.Parameter(torch.empty(C, **kw)) if bias else None
        self.reset_parameters()

    def reset_parameters(self):
        nn.init.xavier_uniform_(self.phi)
        nn.init.constant_(self.alpha, 0.01)
        nn.init.zeros_(self.beta)
        if self.norm_weight is not None:
            nn.init.ones_(self.norm_weight)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def pre(self, x):
        """(y, state): the block input and what post() needs."""
        y, post_w, P = ops.pre(x, self.phi, self.alpha, self.beta, self.norm_weight, layout=self.layout,
                               **self.options)
        return y, (post_w, x, P)

    def post(self, f, state):
        post_w, x, P = state
        return ops.post(f, post_w, x, P, self.bias, layout=self.layout)

    def forward(self, x, block):
        y, state = self.pre(x)
        return self.post(block(y), state)

    def extra_repr(self):
        return f"n={self.n}, C={self.C}, layout={self.layout!r}, " + ", ".join(
            f"{k}={v}" for k, v in self.options.items())
