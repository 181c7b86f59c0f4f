"""mhc.HyperConnection: one layer's mHC residual path as an nn.Module."""

import math

import torch
from torch import nn

from . import _C, ops


class HyperConnection(nn.Module):
    """Wraps a block (attention or MLP) with mHC.

        hc = mhc.HyperConnection(n=4, C=2048)
        x = hc(x, block)            # x: [..., n, C]; block: [..., C] -> [..., C]

    In a loop over layers, the seam between two of them (this layer's post
    step and the next one's pre step) runs as one op, mhc.post_pre:

        y, state = layers[0].pre(x)
        for l in range(L - 1):
            y, state = layers[l].post_pre(blocks[l](y), state, layers[l + 1])
        x = layers[-1].post(blocks[-1](y), state)

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

    def post_pre(self, f, state, next_layer):
        """(y, state) of next_layer for its block, as next_layer.pre(self.post(f, state))
        gives them, in one op (mhc.post_pre): this layer's post step with its
        bias, then next_layer's pre step with its parameters and options."""
        if not isinstance(next_layer, HyperConnection):
            raise TypeError(f"argument 'next_layer' must be a HyperConnection; got {type(next_layer).__name__}")
        if (next_layer.n, next_layer.C, next_layer.layout) != (self.n, self.C, self.layout):
            raise ValueError(f"argument 'next_layer' must have this layer's n, C and layout (n={self.n}, "
                             f"C={self.C}, layout={self.layout!r}); got n={next_layer.n}, C={next_layer.C}, "
                             f"layout={next_layer.layout!r}")
        post_w, x, P = state
        x_next, y, post_next, P_next = ops.post_pre(
            f, post_w, x, P, next_layer.phi, next_layer.alpha, next_layer.beta, next_layer.norm_weight, self.bias,
            layout=self.layout, **next_layer.options)
        return y, (post_next, x_next, P_next)

    def forward(self, x, block):
        y, state = self.pre(x)
        return self.post(block(y), state)

    def extra_repr(self):
        return f"n={self.n}, C={self.C}, layout={self.layout!r}, " + ", ".join(
            f"{k}={v}" for k, v in self.options.items())


class HyperConnectionStack(nn.Module):
    """A stack of blocks, each wrapped with mHC, run the fused way.

        stack = mhc.HyperConnectionStack([block0, block1, block2], n=4, C=2048)
        x = stack(x)                # x: [..., n, C]

    Holds one HyperConnection per block (`stack.layers[i]`, built with the
    keyword options of HyperConnection) and the blocks (`stack.blocks`). With
    `fused` (the default) forward runs pre_0, block_0, seam_0, block_1, ...,
    seam_{L-2}, block_{L-1}, post_{L-1}, each seam one mhc.post_pre (one
    autograd node); with fused=False, each layer's own pre and post.
    """

    def __init__(self, blocks, n, C, *, fused=True, **options):
        super().__init__()
        blocks = list(blocks)
        if not blocks:
            raise ValueError("argument 'blocks' must hold at least one block; got none")
        for i, block in enumerate(blocks):
            if not isinstance(block, nn.Module):
                raise TypeError(f"argument 'blocks' must hold nn.Modules; block {i} is a {type(block).__name__}")
        self.fused = bool(fused)
        self.layers = nn.ModuleList(HyperConnection(n, C, **options) for _ in blocks)
        self.blocks = nn.ModuleList(blocks)

    def forward(self, x):
        layers, blocks = self.layers, self.blocks
        if not self.fused:
            for layer, block in zip(layers, blocks):
                x = layer(x, block)
            return x
        y, state = layers[0].pre(x)
        for l in range(len(layers) - 1):
            y, state = layers[l].post_pre(blocks[l](y), state, layers[l + 1])
        return layers[-1].post(blocks[-1](y), state)

    def extra_repr(self):
        return f"fused={self.fused}"
