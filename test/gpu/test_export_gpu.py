"""mhc.export.record_specs on the GPU: the specs it computes on CPU for a model
(mhc._C.requested_specs, runtime/torch/SpecOf.cpp, a copy of the CUDA entries'
decisions) are the specs the CUDA entries request when the model runs on the
GPU, forward and backward: every kernel MHC_LOG=1 reports taking, and every
spec a reference-path warning names. test/python/test_export.py checks the
CPU side against mhc-opt.

Run on the GPU machine: pytest -q test/gpu/test_export_gpu.py
"""

import os
import pathlib
import re
import subprocess
import sys

import pytest
import torch

assert torch.cuda.is_available(), "the GPU suite needs a GPU"
ROOT = pathlib.Path(__file__).resolve().parents[2]

# Runs the test model on CUDA, forward and backward, with MHC_LOG=1 (read once per process).
RUN = """
import sys, torch
sys.path.insert(0, {tests!r})
import mhc.export
from test_export import Transformer, tokens
torch.manual_seed(0)
model = Transformer(stack={stack}).cuda()
(ids,) = tokens(S=5, B=3)
model(ids.cuda()).float().sum().backward()
torch.cuda.synchronize()
"""


def arch():
    major, _ = torch.cuda.get_device_capability()
    return {9: "sm_90a", 10: "sm_100a"}.get(major, "sm_80")


@pytest.mark.parametrize("stack", [True, False], ids=["stack", "per_layer"])
def test_recorded_specs_are_the_gpu_requests(stack):
    script = RUN.format(tests=str(ROOT / "test" / "python"), stack=stack)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env={**os.environ, "MHC_LOG": "1"})
    assert run.returncode == 0, run.stderr[-4000:]
    taken = re.findall(r"^\[mhc\] \w+: kernel \S+ \[([^\]]+)\]$", run.stderr, re.M)
    referenced = re.findall(r"running the reference path \(.*\) for (\S+)", run.stderr)
    assert taken, run.stderr[-4000:]

    import mhc.export
    sys.path.insert(0, str(ROOT / "test" / "python"))
    from test_export import Transformer, tokens
    torch.manual_seed(0)
    recorded = mhc.export.record_specs(Transformer(stack=stack), tokens(S=5, B=3), arch=arch(), backward=True)
    assert sorted(set(taken) | set(referenced)) == sorted(recorded)
