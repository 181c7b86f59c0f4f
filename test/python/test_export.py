"""mhc.export: a PyTorch model's graph in the mhc dialect, read and lowered by
mhc-opt, and the kernels it lists are those the model requests on CUDA
(mhc.export.record_specs, computed on CPU through runtime/torch/SpecOf.cpp)."""

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest
import torch
from torch import nn

import mhc
import mhc.export
from mhc import _C

ROOT = pathlib.Path(__file__).resolve().parents[2]
PIPELINE = ["--mhc-expand-layers", "--canonicalize", "--cse", "--mhc-fuse-pre", "--mhc-fuse-layers",
            "--mhc-specialize=arch=sm_90a", "--mhc-report-kernels"]
N, C, HEADS, LAYERS, VOCAB = 4, 32, 4, 4, 50


def tool(name):
    """The built tool: the package's or $MHC_COMPILER's directory, else build/bin."""
    for d in (os.path.dirname(shutil.which(_C.compiler()) or ""), ROOT / "build" / "bin"):
        path = pathlib.Path(d) / name
        if d and path.is_file():
            return str(path)
    raise AssertionError(f"{name} is not built (cmake --build build): the export tests need it")


class Attention(nn.Module):
    def __init__(self, C=C):
        super().__init__()
        self.norm = nn.LayerNorm(C)
        self.attn = nn.MultiheadAttention(C, HEADS)

    def forward(self, y):  # y: [S, B, C]
        h = self.norm(y)
        return self.attn(h, h, h, need_weights=False)[0]


class MLP(nn.Module):
    def __init__(self, C=C):
        super().__init__()
        self.net = nn.Sequential(nn.LayerNorm(C), nn.Linear(C, 4 * C), nn.GELU(), nn.Linear(4 * C, C))

    def forward(self, y):
        return self.net(y)


class Transformer(nn.Module):
    """LAYERS layers of attention and MLP, each block inside mHC's residual
    streams: `stack` = HyperConnectionStack (the layer seams fused, mhc.post_pre),
    else a HyperConnection per block (the per-layer path: pre, block, post).
    C is the residual width (test/gpu/test_model_bundle_gpu.py trains it wider)."""

    def __init__(self, stack, C=C, **options):
        super().__init__()
        self.C = C
        self.embed = nn.Embedding(VOCAB, C)
        blocks = [b for _ in range(LAYERS) for b in (Attention(C), MLP(C))]
        if stack:
            self.stack = mhc.HyperConnectionStack(blocks, N, C, **options)
        else:
            self.blocks = nn.ModuleList(blocks)
            self.hcs = nn.ModuleList(mhc.HyperConnection(N, C, **options) for _ in blocks)
        self.norm = nn.LayerNorm(C)
        self.head = nn.Linear(C, VOCAB)

    def forward(self, ids):  # ids: [S, B]
        e = self.embed(ids)
        x = e.unsqueeze(-2).expand(*e.shape[:-1], N, self.C).contiguous()  # n copies: [S, B, n, C]
        if hasattr(self, "stack"):
            x = self.stack(x)
        else:
            for hc, block in zip(self.hcs, self.blocks):
                x = hc(x, block)
        return self.head(self.norm(x.sum(-2)))


def tokens(S=8, B=2):
    return (torch.randint(0, VOCAB, (S, B)),)


def lower(graph, *passes):
    run = subprocess.run([tool("mhc-opt"), str(graph), *passes, "-o", os.devnull], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    return run.stdout


def reported(report):
    """The specs --mhc-report-kernels lists, and which of them fall back."""
    specs, fallback = [], []
    for line in report.splitlines():
        m = re.match(r"\s+\S+\s+\d+ op\(s\)\s+(codegen|reference)\s+(\S+)", line)
        if m:
            specs.append(m.group(2))
            if m.group(1) == "reference":
                fallback.append(m.group(2))
    return specs, fallback


def ops_in(text):
    return sorted(set(re.findall(r"= (mhc\.\w+|func\.call|arith\.\w+)", text)))


@pytest.fixture(scope="module")
def stack_model():
    torch.manual_seed(0)
    return Transformer(stack=True).eval()


@pytest.fixture(scope="module")
def layer_model():
    torch.manual_seed(0)
    return Transformer(stack=False).eval()


def test_export_writes_the_dialect(layer_model, tmp_path):
    path = tmp_path / "model.mlir"
    text = mhc.export.export(layer_model, tokens(), path)
    assert path.read_text() == text
    # Each HyperConnection's pre step as its four ops, its post step as expand_combine.
    for op, count in [("project", 8), ("scale", 8), ("sinkhorn", 8), ("aggregate", 8), ("expand_combine", 8)]:
        assert len(re.findall(rf"= mhc\.{op} ", text)) == count, op
    # Dynamic tokens: S * B tokens are `?`; streams [M, n, C] in the default layout nc.
    assert re.search(r"mhc\.project nc %\w+, %\w+ weight %\w+ \{n = 4 : i64\} : "
                     r"\(tensor<\?x4x32xf32>, tensor<24x128xf32>, tensor<128xf32>\)", text)
    assert "softmax_eps" in text and "iters = 20 : i64" in text and "eps = 9.999999975e-07 : f32" in text
    # The blocks: one opaque call per run of other nodes (embedding; 8 blocks; norm and head).
    decls = re.findall(r"func\.func private @(\w+)\(", text)
    calls = re.findall(r"func\.call @(\w+)\(", text)
    assert calls == decls and len(calls) == 10
    # Each named after the module holding its computing nodes (MLP's: its nn.Sequential).
    assert decls[1:9] == [f"blocks_{i}_{i + 2}" if i % 2 == 0 else f"blocks_{i}_net_{i + 2}" for i in range(8)]
    # The block's call takes y (and its parameters) and gives f: the residual
    # streams, post and P flow from the mhc ops straight into expand_combine.
    assert re.search(r"%\w+ = func\.call @blocks_0_2\(%pre_y, ", text)
    assert re.search(r"= mhc\.expand_combine nc %\w+, %pre_post, %reshape, %pre_P ", text)
    # Parameters are arguments, named after the module's.
    assert '{mhc.name = "hcs.3.phi"}' in text and '{mhc.name = "blocks.0.attn.in_proj_weight"}' in text
    lower(path)  # parses and verifies


def test_static_tokens(layer_model):
    text = mhc.export.export(layer_model, tokens(S=8, B=2), dynamic_tokens=False)
    assert "?" not in text and "tensor<16x4x32xf32>" in text


# What the runtime runs for a layer seam whose kernel codegen does not build
# (SeamOps.cpp): each op, and whether x's gradient enters it through acc.
SEAM_PARTS = {"post_pre.fwd": {"expand_combine.fwd": False, "pre.fwd": False},
              "post_pre.bwd": {"aggregate.bwd": True, "sinkhorn.bwd": False, "scale.bwd": False, "project.bwd": True,
                               "expand_combine.bwd": False}}


def fields(spec):
    return dict(f.split("=", 1) for f in spec.split(";")[1:])


def is_part_of(spec, seam):
    """Whether `spec` is one of the ops that `seam` (a fallback spec) runs as."""
    op, parts = spec.split(";")[0], SEAM_PARTS.get(seam.split(";")[0], {})
    if op not in parts or (fields(spec).get("acc") == "1") != parts[op]:
        return False
    return all(fields(seam).get(k, v) == v for k, v in fields(spec).items() if k != "acc")


def other_side(spec):
    """A pre / post_pre forward spec for the other side of the one-launch
    threshold (coop=1 added or removed); other specs as they are."""
    if not spec.startswith(("pre.fwd;", "post_pre.fwd;")):
        return spec
    return spec.replace(";coop=1;", ";") if ";coop=1;" in spec else spec.replace(";arch=", ";coop=1;arch=")


def same_kernels(report, requested):
    """The kernels mhc-opt builds are the ones requested at run time. A layer
    seam it fuses but codegen does not build yet (issue 34), listed on the
    reference path, runs at run time as its parts, which are then the other
    requests. Returns those fallbacks."""
    specs, fallback = reported(report)
    built = [s for s in specs if s not in fallback]
    # A dynamic M builds the pre step's and the seams' forward for both sides
    # of the one-launch threshold (docs/design/serve.md); one token count
    # requests one of them.
    assert all(s in requested or other_side(s) in requested for s in built)
    for s in set(requested) - set(built):
        assert any(is_part_of(s, seam) for seam in fallback), s
    for seam in fallback:
        assert all(any(r.startswith(op + ";") for r in requested) for op in SEAM_PARTS[seam.split(";")[0]]), seam
    assert all(not _C.unsupported_reason(s) for s in requested)
    return fallback


def requested_at_any_m(model, S=5):
    """The specs `model` requests at min(S, threshold) tokens and at one token
    count past the one-launch threshold: the graph's M is `?`, and the runtime
    picks the pre step's and the seams' forward by M (docs/design/serve.md),
    so the kernels mhc-opt builds for it cover both."""
    small = mhc.export.record_specs(model, tokens(S=min(S, _C.ONE_LAUNCH_MAX_TOKENS), B=1), arch="sm_90a")
    large = mhc.export.record_specs(model, tokens(S=_C.ONE_LAUNCH_MAX_TOKENS + 1, B=1), arch="sm_90a")
    assert all((";coop=1;" in s) == s.startswith(("pre.fwd", "post_pre.fwd")) for s in small)
    assert not any(";coop=1;" in s for s in large)
    return small, list(dict.fromkeys(small + large))


@pytest.mark.parametrize("stack", [True, False], ids=["stack", "per_layer"])
def test_kernels_listed_are_the_kernels_requested(stack, stack_model, layer_model, tmp_path):
    model = stack_model if stack else layer_model
    path = tmp_path / "model.mlir"
    mhc.export.export(model, tokens(), path)
    # Other token counts than the export's: the graph's M is `?`.
    small, requested = requested_at_any_m(model)
    if stack:
        # HyperConnectionStack: the first pre step, 7 seams, the last post step.
        seams_apart = same_kernels(lower(path, *PIPELINE), requested)
        seams = [] if seams_apart else ["post_pre.fwd"]
        assert [s.split(";")[0] for s in small] == ["pre.fwd", *seams, "expand_combine.fwd"]
        # The bundle mhc-opt writes holds every kernel the model requests (so a GPU runs it with no JIT).
        bundle = tmp_path / "bundle"
        lower(path, *PIPELINE[:-1], "--mhc-generate-kernels", f"--mhc-write-bundle=dir={bundle}")
        index = json.loads((bundle / "index.json").read_text())
        assert sorted(k["spec"] for k in index["kernels"]) == sorted(requested)
        assert all((bundle / f"{_C.kernel_name(s)}.cubin").stat().st_size > 0 for s in requested)
    else:
        # A HyperConnection per block runs each pre and post step: the pipeline
        # without --mhc-fuse-layers; with it, the stack's kernels.
        assert not same_kernels(lower(path, *[p for p in PIPELINE if p != "--mhc-fuse-layers"]), requested)
        assert [s.split(";")[0] for s in small] == ["pre.fwd", "expand_combine.fwd"]
        same_kernels(lower(path, *PIPELINE), requested_at_any_m(stack_model, S=8)[1])


def test_backward_kernels_listed_are_the_kernels_requested(stack_model, tmp_path):
    path = tmp_path / "model.mlir"
    text = mhc.export.export(stack_model, tokens(), path, backward=True)
    assert "func.func @forward_backward(" in text
    requested = mhc.export.record_specs(stack_model, tokens(S=5, B=3), arch="sm_90a", backward=True)
    assert {s.split(";")[0] for s in requested} >= {"expand_combine.bwd", "aggregate.bwd", "project.bwd"}
    same_kernels(lower(path, *PIPELINE), requested)
    # The joint graph: each seam's gradient as its five ops, x_next's gradients
    # summed through acc (as SeamOps.cpp runs it); the first pre step's through
    # acc too (Autograd.cpp), but for the seam's, which reads x through another
    # reshape of the streams, so autograd adds it inside the opaque backward.
    # mhc-fuse-layers makes each seam's gradient one mhc.post_pre_grad.
    body = text[text.index("func.func @forward_backward("):]
    assert len(re.findall(r"= mhc\.expand_combine_grad ", body)) == 8 and "arith.addf" not in body
    assert len(re.findall(r"= mhc\.aggregate_grad nc [^{]* acc %", body)) == 7
    run = subprocess.run([tool("mhc-opt"), str(path), *PIPELINE[:-1]], capture_output=True, text=True, check=True)
    fused = run.stdout[run.stdout.index("func.func @forward_backward("):]
    assert len(re.findall(r"= mhc\.post_pre_grad ", fused)) == 7 and "arith.addf" not in fused


class Tanh(nn.Module):
    def __init__(self, dtype):
        super().__init__()
        self.linear = nn.Linear(64, 64, dtype=dtype)

    def forward(self, y):
        return torch.tanh(self.linear(y))


def test_bf16_cn_layout_bias_no_weight_log_tf32(tmp_path):
    # The other attributes and dtypes, forward and backward: bf16 streams (C, n),
    # f32 parameters, expand_combine's bias, no RMSNorm weight, log-domain Sinkhorn, tf32.
    stack = mhc.HyperConnectionStack([Tanh(torch.bfloat16) for _ in range(3)], N, 64, layout="cn", bias=True,
                                     norm_weight=False, mode="log", tf32=True)
    path = tmp_path / "bf16.mlir"
    text = mhc.export.export(stack, (torch.randn(6, 64, N, dtype=torch.bfloat16),), path, backward=True)
    assert re.search(r"= mhc\.project cn %\w+, %\w+ \{n = 4 : i64, tf32\} : \(tensor<\?x64x4xbf16>, tensor<24x256xf32>\)",
                     text)
    assert re.search(r"= mhc\.expand_combine cn %\w+, %\w+, %\w+, %\w+ bias %\w+ \{n = 4 : i64\} : \(tensor<\?x64xbf16>", text)
    sinkhorns = re.findall(r"= mhc\.sinkhorn(?:_grad)? (\w+) [^{]*\{([^}]*)\}", text)
    assert len(sinkhorns) == 3 + 3 + 3 and all(m == "log" and a == "n = 4 : i64, iters = 20 : i64" for m, a in sinkhorns)
    requested = mhc.export.record_specs(stack, (torch.randn(5, 64, N, dtype=torch.bfloat16),), backward=True)
    assert all(";act=bf16;" in s for s in requested if s.startswith(("pre.", "project.", "expand_combine.")))
    same_kernels(lower(path, *PIPELINE), requested)


class PerLayer(nn.Module):
    """A HyperConnection per block on [M, n, C] streams: each x_l feeds layer l's
    pre step and its post step, so autograd adds their gradients (aten.add)."""

    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(Tanh(torch.float32) for _ in range(3))
        self.hcs = nn.ModuleList(mhc.HyperConnection(N, 64) for _ in range(3))

    def forward(self, x):
        for hc, block in zip(self.hcs, self.blocks):
            x = hc(x, block)
        return x


def test_per_layer_backward_adds_of_x_gradients(tmp_path):
    path = tmp_path / "per_layer.mlir"
    text = mhc.export.export(PerLayer(), (torch.randn(6, N, 64),), path, backward=True)
    body = text[text.index("func.func @forward_backward("):]
    # x_1's and x_2's: the post step's gx plus the pre step's (project_grad's, aggregate's through its acc).
    assert len(re.findall(r"= arith\.addf %expand_combine_backward(_1)?_gx, %project_backward(_1)?_gx ", body)) == 2
    requested = mhc.export.record_specs(PerLayer(), (torch.randn(5, N, 64),), backward=True)
    assert not same_kernels(lower(path, *[p for p in PIPELINE if p != "--mhc-fuse-layers"]), requested)


def test_te_names_export_cn_layout_and_log_sinkhorn(tmp_path):
    class TELayer(nn.Module):
        def __init__(self):
            super().__init__()
            N_ = _C.num_logits(N)
            self.phi = nn.Parameter(torch.randn(N_, N * C) * 0.02)
            self.alpha = nn.Parameter(torch.full((3,), 0.01))
            self.beta = nn.Parameter(torch.zeros(1, N_))
            self.mlp = MLP()

        def forward(self, x):  # x: [M, C, n]
            M = x.shape[0]
            H, ms = mhc.mhc_fused_projection(x.reshape(M, C * N), self.phi)
            pre, post, res = mhc.mhc_fused_scale(H, self.alpha, self.beta, ms, N)
            P = mhc.mhc_fused_sinkhorn(res.reshape(M, N, N), N)
            y = mhc.mhc_fused_aggregate(x, pre, N)
            return mhc.mhc_fused_expand_combine(self.mlp(y), None, post, x, P, N)

    path = tmp_path / "te.mlir"
    text = mhc.export.export(TELayer(), (torch.randn(6, C, N),), path)
    assert "mhc.sinkhorn log" in text and "mhc.project cn" in text and "norm_eps = 1.192092896e-07 : f32" in text
    # TE's functions run one op each: the kernels of the pipeline without fusion.
    unfused = [p for p in PIPELINE if p not in ("--mhc-fuse-pre", "--mhc-fuse-layers")]
    requested = mhc.export.record_specs(TELayer(), (torch.randn(5, C, N),))
    assert not same_kernels(lower(path, *unfused), requested)
    assert [s.split(";")[0] for s in requested] == ["project.fwd", "scale.fwd", "sinkhorn.fwd", "aggregate.fwd",
                                                    "expand_combine.fwd"]


def test_cli_export(tmp_path):
    out = tmp_path / "cli.mlir"
    run = subprocess.run([sys.executable, "-m", "mhc", "export", f"{__file__}:cli_model", "-o", str(out)],
                         capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    assert "mhc.expand_combine" in out.read_text() and str(out) in run.stdout
    lower(out, *PIPELINE)


def cli_model():
    """The factory `mhc export` calls in test_cli_export: (model, example inputs)."""
    torch.manual_seed(0)
    return Transformer(stack=True).eval(), tokens()


def test_requested_specs_of_single_calls():
    x, pre, gy = torch.randn(3, N, C), torch.rand(3, N), torch.randn(3, C)
    assert _C.requested_specs("aggregate", (x, pre, N, "nc"), "sm_100a") == \
        [_C.canonical_spec(f"aggregate.fwd;n={N};act=f32;layout=nc;C={C};arch=sm_100a")]
    # The backward ops' optional accumulator sets acc; no tokens, no request.
    assert _C.requested_specs("aggregate_backward", (gy, x, pre, N, "nc", torch.zeros_like(x)), "sm_90a") == \
        [_C.canonical_spec(f"aggregate.bwd;n={N};act=f32;layout=nc;C={C};acc=1;arch=sm_90a")]
    assert _C.requested_specs("aggregate", (x[:0], pre[:0], N, "nc"), "sm_90a") == []
    # TE's f32 buffer (the *_backward_into ops, the buffer last): acc=f32 for 2-byte x, acc=1's for f32 x
    # (expand_combine's reads none); project_backward takes it as an f32 acc.
    xb, gyb, buf = x.to(torch.bfloat16), gy.to(torch.bfloat16), torch.zeros(x.shape)
    assert _C.requested_specs("aggregate_backward_into", (gyb, xb, pre, N, "nc", buf), "sm_90a") == \
        [_C.canonical_spec(f"aggregate.bwd;n={N};act=bf16;layout=nc;C={C};acc=f32;arch=sm_90a")]
    assert _C.requested_specs("aggregate_backward_into", (gy, x, pre, N, "nc", buf), "sm_90a") == \
        [_C.canonical_spec(f"aggregate.bwd;n={N};act=f32;layout=nc;C={C};acc=1;arch=sm_90a")]
    post, P, g = torch.rand(3, N), torch.rand(3, N, N), torch.randn(3, N, C)
    assert _C.requested_specs("expand_combine_backward_into",
                              (g.to(torch.bfloat16), gyb, post, xb, P, None, N, "nc", buf), "sm_90a") == \
        [_C.canonical_spec(f"expand_combine.bwd;n={N};act=bf16;layout=nc;C={C};bias=0;acc=f32;"
                           "arch=sm_90a")]
    assert _C.requested_specs("expand_combine_backward_into", (g, gy, post, x, P, None, N, "nc", buf),
                              "sm_90a") == \
        [_C.canonical_spec(f"expand_combine.bwd;n={N};act=f32;layout=nc;C={C};bias=0;arch=sm_90a")]
    phi, h, ms = torch.randn(2 * N + N * N, N * C), torch.randn(3, 2 * N + N * N), torch.rand(3)
    assert _C.requested_specs("project_backward", (h, ms, xb, phi, None, N, "nc", False, buf), "sm_90a") == \
        [_C.canonical_spec(f"project.bwd;n={N};act=bf16;param=f32;layout=nc;C={C};tf32=0;weight=0;acc=f32;"
                           "arch=sm_90a")]
    with pytest.raises(ValueError, match="not an mhc op with kernels: 'num_logits'"):
        _C.requested_specs("num_logits", (N,), "sm_90a")
    with pytest.raises(ValueError, match="unknown arch 'sm_75'"):
        _C.requested_specs("aggregate", (x, pre, N, "nc"), "sm_75")
