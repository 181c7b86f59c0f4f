"""A model runs from a prebuilt bundle alone (GPU): two HyperConnection layers
around Linear blocks (n = 4, C = 256, float32 and bf16), forward and backward,
first with the JIT in a fresh cache (MHC_LOG names the specs it used), then,
after `mhc precompile` of those specs, in a process with the compiler hidden
from PATH, MHC_COMPILER pointing nowhere, an unusable cache directory and
MHC_BUNDLE_PATH: every kernel comes from the bundle (zero compiles, zero
reference calls) and outputs and gradients equal the JIT run's bitwise (the
same compiler built both; results are deterministic for a given M).

On the GPU machine: python3 -m pytest -q test/gpu/test_bundle_gpu.py
(after test/gpu/setup-gpu.sh, which sets MHC_COMPILER).
"""

import pytest
import torch

from bundle_env import hidden_env, jit_env, kernel_compiler, logged_specs, precompile, run_script

assert torch.cuda.is_available(), "the GPU suite needs a GPU"

MODEL = r"""
import sys, torch, mhc
dtype = getattr(torch, sys.argv[2])
torch.manual_seed(0)
layers = [(mhc.HyperConnection(n=4, C=256), torch.nn.Linear(256, 256)) for _ in range(2)]
params = [p for hc, block in layers for p in (*hc.parameters(), *block.parameters())]
for hc, block in layers:
    hc.cuda(), block.cuda().to(dtype)
x = torch.randn(333, 4, 256, device="cuda", dtype=dtype, requires_grad=True)
h = x
for hc, block in layers:
    h = hc(h, block)
h.float().square().sum().backward()
torch.cuda.synchronize()
torch.save({"out": h.detach().cpu(), "grads": [p.grad.cpu() for p in params] + [x.grad.cpu()],
            "stats": mhc._C.stats()}, sys.argv[1])
"""


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_model_runs_from_a_bundle_alone(tmp_path, dtype):
    compiler = kernel_compiler()
    jit, log = run_script(MODEL, tmp_path / "jit.pt", jit_env(tmp_path, compiler), dtype)
    specs = logged_specs(log)
    assert specs and jit["stats"]["reference_calls"] == 0 and jit["stats"]["compiles"] == len(specs)

    bundle = tmp_path / "bundle"
    precompile(specs, bundle, compiler)
    aot, _ = run_script(MODEL, tmp_path / "aot.pt", hidden_env(tmp_path, bundle), dtype)
    s = aot["stats"]
    assert (s["compiles"], s["disk_hits"], s["reference_calls"]) == (0, 0, 0), s
    assert s["bundle_hits"] == len(specs) and s["kernel_calls"] == jit["stats"]["kernel_calls"], s
    assert torch.equal(aot["out"], jit["out"])
    assert all(torch.equal(a, b) for a, b in zip(aot["grads"], jit["grads"]))
