"""HyperConnection under data parallelism on CPU: two gloo processes, each
training on half of every batch under DistributedDataParallel (and FSDP2's
fully_shard), match one process on the whole batch step for step (averaged
gradients, parameters after AdamW). test/gpu/test_ddp_gpu.py runs the same
harness with NCCL on two GPUs."""

import os
import time
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import nn
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor
from torch.nn.parallel import DistributedDataParallel as DDP

import mhc

N, C, M, STEPS, WORLD = 4, 64, 24, 3, 2  # M even: each rank trains on M / 2 tokens
SEED = int(os.environ.get("MHC_SEED") or int.from_bytes(os.urandom(4), "little"))
VARIANTS = ("ddp", "ddp_static_graph", "ddp_find_unused", "fsdp")
HC_PARAMS = {"phi", "alpha", "beta", "norm_weight", "bias"}
# Each step compares a rank with one process stepping from the same
# parameters, so the gradients differ only in the order of float32 sums over
# tokens (M/2 per rank, then the all-reduce's average, against M at once):
# either is within ~M u = 1.4e-6 (u = 2^-24) of the exact sum relative to
# the terms' magnitudes. AdamW's step lr m / (sqrt(v) + eps) is ~lr once an
# element's gradient exceeds eps: with the default 1e-8 a gradient that
# cancels down to its rounding error (~1e-9 here) decides a step; with
# eps = 1e-4 a step moves by at most lr / eps times its gradient's
# difference, so parameters agree as gradients do. 1e-5 leaves room for
# cancellation over tokens and layers; an unaveraged gradient misses it by far.
RTOL = 1e-5
ADAMW = dict(lr=1e-2, weight_decay=0.1, eps=1e-4)


class Stack(nn.Module):
    """Three HyperConnection layers around their own Linear blocks: both
    Sinkhorn modes, with and without the output bias."""

    def __init__(self):
        super().__init__()
        kinds = (("softmax_eps", True), ("log", False), ("softmax_eps", True))
        self.hcs = nn.ModuleList(mhc.HyperConnection(N, C, mode=m, bias=b) for m, b in kinds)
        self.blocks = nn.ModuleList(nn.Linear(C, C) for _ in kinds)
        with torch.no_grad():  # away from the near-identity start, so that every parameter matters
            for hc in self.hcs:
                hc.alpha.uniform_(0.5, 1.5)
                hc.beta.normal_(0, 0.5)
                hc.norm_weight.normal_(1, 0.1)
                if hc.bias is not None:
                    hc.bias.normal_(0, 0.5)

    def forward(self, x):
        for hc, block in zip(self.hcs, self.blocks):
            x = hc(x, block)
        return x


def make_model(seed, device):
    """The same initial parameters in every process (CPU generator, then moved)."""
    torch.manual_seed(seed)
    return Stack().to(device)


def make_batches(seed):
    """Streams and targets of every step, [STEPS, M, n, C] each."""
    gen = torch.Generator().manual_seed(seed + 1)
    return torch.randn(STEPS, M, N, C, generator=gen), torch.randn(STEPS, M, N, C, generator=gen)


def _full(t):
    if t is None:
        return None
    return (t.full_tensor() if isinstance(t, DTensor) else t).detach().cpu().clone()


def train(wrapped, params, ref, rank, x, target):
    """AdamW steps on the mean squared error: `wrapped` on this rank's half of
    each batch and, in lockstep, `ref` (a plain copy of the model, its own
    AdamW) on the whole batch from the same parameters. Returns per step the
    gradients and the parameters after the step of both, {name: CPU tensor}."""
    opt = torch.optim.AdamW(params.values(), **ADAMW)
    ref_params = dict(ref.named_parameters())
    ref_opt = torch.optim.AdamW(ref_params.values(), **ADAMW)
    half = slice(rank * M // WORLD, (rank + 1) * M // WORLD)
    steps = []
    for s in range(STEPS):
        with torch.no_grad():
            for k, p in ref_params.items():
                p.copy_(_full(params[k]))
        opt.zero_grad()
        ref_opt.zero_grad()
        F.mse_loss(wrapped(x[s, half]), target[s, half]).backward()
        F.mse_loss(ref(x[s]), target[s]).backward()
        grads, ref_grads = ({k: _full(p.grad) for k, p in ps.items()} for ps in (params, ref_params))
        opt.step()
        ref_opt.step()
        steps.append(dict(grad=grads, ref_grad=ref_grads, param={k: _full(p) for k, p in params.items()},
                          ref_param={k: _full(p) for k, p in ref_params.items()}))
    return steps


def run_variant(variant, seed, device, rank):
    """One rank of `variant` and its single-process reference."""
    model, ref = make_model(seed, device), make_model(seed, device)
    ids = [device.index] if device.type == "cuda" else None
    if variant == "fsdp":
        mesh = dist.device_mesh.init_device_mesh(device.type, (WORLD,))
        for hc in model.hcs:
            fully_shard(hc, mesh=mesh)
        wrapped = fully_shard(model, mesh=mesh)
    elif variant == "ddp":
        wrapped = DDP(model, device_ids=ids)
    elif variant == "ddp_static_graph":
        wrapped = DDP(model, device_ids=ids, static_graph=True)
    else:
        wrapped = DDP(model, device_ids=ids, find_unused_parameters=True)
    x, target = make_batches(seed)
    # model's own names (no wrapper prefix); FSDP's sharded DTensors
    return train(wrapped, dict(model.named_parameters()), ref, rank, x.to(device), target.to(device))


def _worker(rank, device_type, variants, seed, tmp):
    torch.set_num_threads(1)
    device = torch.device(device_type, rank) if device_type == "cuda" else torch.device("cpu")
    if device_type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if device_type == "cuda" else "gloo", store=dist.FileStore(f"{tmp}/store", WORLD),
                            rank=rank, world_size=WORLD, timeout=timedelta(seconds=120))
    try:
        before = mhc._C.stats()
        out = {v: run_variant(v, seed, device, rank) for v in variants}
        after = mhc._C.stats()
        out["stats"] = {k: after[k] - before[k] for k in ("kernel_calls", "reference_calls")}
        torch.save(out, f"{tmp}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def spawn(device_type, variants, seed, tmp, limit_s):
    """Runs _worker on WORLD processes (a FileStore in tmp: no network beyond
    loopback); returns each rank's results. Fails after limit_s."""
    ctx = mp.spawn(_worker, args=(device_type, variants, seed, str(tmp)), nprocs=WORLD, join=False)
    deadline = time.monotonic() + limit_s
    while not ctx.join(timeout=max(deadline - time.monotonic(), 0.1)):
        if time.monotonic() > deadline:
            for p in ctx.processes:
                p.kill()
            pytest.fail(f"{WORLD} {device_type} ranks did not finish in {limit_s} s (seed {seed})")
    return [torch.load(f"{tmp}/rank{r}.pt") for r in range(WORLD)]


def rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-300)).item()


def check_matches(ranks, variant, seed):
    """Each rank's averaged gradients and parameters after every step against
    one process's on the whole batch from the same parameters; the ranks'
    parameters bitwise equal."""
    for rank, res in enumerate(ranks):
        for s, step in enumerate(res[variant]):
            for what in ("grad", "param"):
                for k, want in step["ref_" + what].items():
                    got = step[what][k]
                    assert got is not None, f"{variant} rank {rank} step {s}: {k} got no gradient (seed {seed})"
                    err = rel(got, want)
                    assert err <= RTOL, f"{variant} rank {rank} step {s}: {what} {k} rel err {err:.2e} (seed {seed})"
            for k, p in step["param"].items():
                assert torch.equal(p, ranks[0][variant][s]["param"][k]), f"{variant} step {s}: ranks differ in {k}"


def check_every_parameter_gets_a_gradient(ranks):
    """Under plain DDP each rank's first gradient of every parameter, among
    them every HyperConnection parameter, exists, is finite and not zero."""
    for rank, res in enumerate(ranks):
        grads = res["ddp"][0]["grad"]
        assert {k.rsplit(".", 1)[1] for k in grads if k.startswith("hcs.")} == HC_PARAMS, list(grads)
        for k, g in grads.items():
            assert g is not None and torch.isfinite(g).all() and g.norm() > 0, f"rank {rank}: {k}: {g}"


@pytest.fixture(scope="module")
def cpu_runs(tmp_path_factory):
    with pytest.MonkeyPatch.context() as env:
        env.setenv("GLOO_SOCKET_IFNAME", os.environ.get("GLOO_SOCKET_IFNAME", "lo"))  # loopback only
        return spawn("cpu", VARIANTS, SEED, tmp_path_factory.mktemp("ddp"), limit_s=300)


@pytest.mark.parametrize("variant", VARIANTS)
def test_data_parallel_matches_one_process_on_the_whole_batch(cpu_runs, variant):
    check_matches(cpu_runs, variant, SEED)


def test_every_hyperconnection_parameter_gets_a_gradient_under_ddp(cpu_runs):
    check_every_parameter_gets_a_gradient(cpu_runs)
