"""Issue 37's acceptance on the GPU: test/python/test_export.py's transformer
(4 layers of nn.MultiheadAttention and a Linear-GELU-Linear MLP, n = 4), here
with C = 256 in bf16 (mHC parameters float32) on 333 tokens, trains 3 AdamW
steps three ways: (a) inside mhc.HyperConnectionStack (the seams as
mhc.post_pre), (b) a HyperConnection per block, eager, and (c) (b) under
torch.compile(fullgraph=True), where the fusion pass must turn its 7 seams into
mhc.post_pre (mhc.compile_stats()).

First with the JIT in a fresh cache (MHC_LOG=1 names every spec it compiles),
then, after `mhc precompile --specs` of those specs, in a process with no
kernel compiler (mhc-compile and mhc-opt off PATH, MHC_COMPILER naming a
missing file), an unusable cache directory and MHC_BUNDLE_PATH: zero compiles,
zero disk hits and zero reference calls (mhc._C.stats()), every spec a bundle
hit, and losses and parameters bitwise equal to the JIT process's (the same
compiler built both; deterministic algorithms and the math attention backend
make the rest of the model deterministic too).

On the GPU machine: python3 -m pytest -q test/gpu/test_model_bundle_gpu.py
(after test/gpu/setup-gpu.sh, which sets MHC_COMPILER).
"""

import math
import pathlib

import torch

from bundle_env import hidden_env, jit_env, kernel_compiler, logged_specs, path_without_compiler, precompile, \
    run_script

assert torch.cuda.is_available(), "the GPU suite needs a GPU"
TESTS = pathlib.Path(__file__).resolve().parents[1] / "python"
PHASES = ("stack", "per_layer", "compiled")
SEAMS = 2 * 4 - 1  # 4 layers of 2 blocks each
# The compiled per-layer model's one Dynamo graph after the fusion pass: the
# first layer's pre step (HyperConnection already calls mhc.pre), every seam
# fused, the last layer's post step.
FUSED = {"graphs": 1, "pre": 0, "post_pre": SEAMS, "ops": {"expand_combine": 1, "post_pre": SEAMS, "pre": 1}}
DETERMINISTIC = {"CUBLAS_WORKSPACE_CONFIG": ":4096:8"}

TRAIN = r"""
import sys, torch, mhc
sys.path.insert(0, sys.argv[2])
from test_export import Transformer, VOCAB
torch.use_deterministic_algorithms(True, warn_only=True)
for kernel in ("flash", "mem_efficient", "cudnn"):  # math attention: a deterministic backward
    getattr(torch.backends.cuda, f"enable_{kernel}_sdp")(False)
S, B, STEPS = 37, 9, 3  # 333 tokens
batch = torch.Generator().manual_seed(1)
ids, targets = (torch.randint(0, VOCAB, (S, B), generator=batch).cuda() for _ in range(2))


def model(stack):
    torch.manual_seed(0)
    m = Transformer(stack, C=256).cuda().to(torch.bfloat16)
    for hc in m.modules():
        if isinstance(hc, mhc.HyperConnection):
            hc.float()
    return m


def train(m, run):
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    losses = []
    for _ in range(STEPS):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(run(ids).float().flatten(0, 1), targets.flatten())
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    torch.cuda.synchronize()
    return {"losses": torch.stack(losses).cpu(), "params": [p.detach().cpu() for p in m.parameters()],
            "stats": mhc._C.stats()}


out = {"stack": train(m := model(True), m), "per_layer": train(m := model(False), m)}
mhc.reset_compile_stats()
out["compiled"] = train(m := model(False), torch.compile(m, fullgraph=True))
out["compile_stats"] = mhc.compile_stats()
torch.save(out, sys.argv[1])
"""


def kernel_calls_per_phase(run):
    counts = [0] + [run[phase]["stats"]["kernel_calls"] for phase in PHASES]
    return [b - a for a, b in zip(counts, counts[1:])]


def test_transformer_trains_from_a_bundle_alone(tmp_path):
    compiler = kernel_compiler()
    jit, log = run_script(TRAIN, tmp_path / "jit.pt", jit_env(tmp_path, compiler, **DETERMINISTIC), str(TESTS))
    specs, stats = logged_specs(log), jit["compiled"]["stats"]
    assert specs and stats["reference_calls"] == 0 and stats["compiles"] == len(specs), stats
    assert jit["compile_stats"] == FUSED
    for phase in PHASES:
        losses = jit[phase]["losses"].tolist()
        assert all(map(math.isfinite, losses)) and losses[-1] < losses[0], (phase, losses)
    assert all(calls > 0 for calls in kernel_calls_per_phase(jit)), jit

    bundle = tmp_path / "bundle"
    precompile(specs, bundle, compiler)
    env = hidden_env(tmp_path, bundle, path=path_without_compiler(), **DETERMINISTIC)
    aot, _ = run_script(TRAIN, tmp_path / "aot.pt", env, str(TESTS))
    s = aot["compiled"]["stats"]
    assert (s["compiles"], s["disk_hits"], s["reference_calls"]) == (0, 0, 0), s
    assert s["bundle_hits"] == len(specs), s
    assert kernel_calls_per_phase(aot) == kernel_calls_per_phase(jit)
    assert aot["compile_stats"] == FUSED
    for phase in PHASES:
        assert torch.equal(aot[phase]["losses"], jit[phase]["losses"]), phase
        assert all(torch.equal(a, b) for a, b in zip(aot[phase]["params"], jit[phase]["params"])), phase
