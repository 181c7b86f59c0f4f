"""HyperConnection under DistributedDataParallel and FSDP2 with NCCL on two
GPUs: the CPU test's harness (test/python/test_ddp.py: three layers around
Linear blocks, AdamW, two ranks on halves of every batch against one GPU on
the whole batch step for step, gradients and parameters within its float32
summation-order bound) on CUDA in float32, every mhc op through its
generated kernel.

Needs >= 2 GPUs; on the GPU machine: bash test/gpu/run-ddp.sh
"""

import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
from test_ddp import SEED, VARIANTS, check_every_parameter_gets_a_gradient, check_matches, spawn  # noqa: E402

assert torch.cuda.is_available(), "the GPU suite needs a GPU"
pytestmark = pytest.mark.skipif(torch.cuda.device_count() < 2,
                                reason=f"needs 2 GPUs, this machine has {torch.cuda.device_count()}")


@pytest.fixture(scope="module")
def cuda_runs(tmp_path_factory):
    with pytest.MonkeyPatch.context() as env:
        env.setenv("NCCL_SOCKET_IFNAME", os.environ.get("NCCL_SOCKET_IFNAME", "lo"))  # bootstrap over loopback
        return spawn("cuda", VARIANTS, SEED, tmp_path_factory.mktemp("ddp"), limit_s=420)


@pytest.mark.parametrize("variant", VARIANTS)
def test_data_parallel_on_two_gpus_matches_one_gpu_on_the_whole_batch(cuda_runs, variant):
    check_matches(cuda_runs, variant, SEED)


def test_every_op_ran_its_kernel(cuda_runs):
    """mhc._C.stats in each rank, over every variant and its one-GPU
    reference: kernels ran, the reference path never did."""
    for rank, res in enumerate(cuda_runs):
        assert res["stats"]["kernel_calls"] > 0 and res["stats"]["reference_calls"] == 0, f"rank {rank}: {res['stats']}"


def test_every_hyperconnection_parameter_gets_a_gradient_under_ddp(cuda_runs):
    check_every_parameter_gets_a_gradient(cuda_runs)
