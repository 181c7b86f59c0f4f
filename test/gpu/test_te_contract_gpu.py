"""mhc.te on CUDA: Transformer Engine's mHC contract on the kernel path.

The cases and checks of test/python/test_te_contract.py (every function,
every dtype combination TE's docstrings allow, n = 4 and 1..8, M in {0, 1, 7,
300}, C in {32, 4096, 5129}, forward and backward, TE's dtypes and shapes,
float64 SPEC.md with TE's tolerances), here on the GPU, and:
- no call runs the reference path (mhc._C.stats()'s reference_calls) except
  where documented: M = 0 (nothing to launch: every op's call counts one
  reference call); C = 5129 (K = n*C not a multiple of 8) runs the kernels
  too;
- the same cases with TE's fused_grad_x_acc_buffer for the four functions
  that take it (x's gradient in the buffer or returned, test_te_contract.py's
  BUFFER_FNS), the same reference-call rule (the acc=f32 kernels for bf16 x,
  acc=1's for f32 x) and, with TE, its buffer (or returned gradient) against
  ours;
- the same inputs give the same bits twice (use_split_k or not; with the
  buffer too);
- M = 0 through every torch.ops.mhc op (forward and *_backward) and every
  mhc.* function, forward and backward, on CUDA;
- with MHC_TE_PATH=<a Transformer Engine checkout> (TE's Triton files are
  loaded by path, as bench/bench.py --te does), TE runs on the same inputs
  (n = 4, M > 0): its outputs' and gradients' dtypes and shapes must be
  mhc's, and the values agree within twice TE's tolerance.

Every kernel the cases request is built before the first test, in parallel
(test/gpu/precompile.py: the specs of a dry pass on the CPU, mhc-compile on
every core); the time it took is printed. TE runs with its own
NVTE_DISABLE_TRITON_AUTOTUNING=1 (one config per kernel, as TE's tests do):
its autotuning otherwise compiles and times every config for each new shape.

    MHC_TE_PATH=/path/to/TransformerEngine python3 -m pytest -q test/gpu/test_te_contract_gpu.py
"""

import functools
import importlib.util
import os
import sys
import time

import pytest
import torch

import mhc
from mhc import te

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "python"))
import test_hardening as hardening  # noqa: E402  (op_args: every torch.ops.mhc op's arguments)
import test_te_contract as contract  # noqa: E402  (its helpers; its tests are not collected here)

sys.path.insert(0, here)
import precompile  # noqa: E402

assert torch.cuda.is_available(), "the GPU suite needs a GPU"
DEV = "cuda"
CASES = [(fn, c) for fn in contract.AXES for c in contract.cases(fn)]
IDS = [f"{fn}-{contract.case_id(c)}" for fn, c in CASES]


def load_te():
    """TE's module from MHC_TE_PATH (None when unset), through bench.py's loader."""
    path = os.environ.get("MHC_TE_PATH")
    if not path:
        return None
    os.environ.setdefault("NVTE_DISABLE_TRITON_AUTOTUNING", "1")  # read when TE's module is loaded
    spec = importlib.util.spec_from_file_location("mhc_bench", os.path.join(here, "..", "..", "bench", "bench.py"))
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    bench.load_te(path)
    return sys.modules["transformer_engine.pytorch.triton.mhc"]


TE = load_te()


def same_bits_case(fn):
    """test_same_inputs_same_bits's case: bf16 throughout, M = 300, C = 4096."""
    return dict.fromkeys(contract.AXES[fn], contract.BF16), 300, 4096 if fn in contract.HAS_C else None, 4


def dry_run(fn, case, acc_buffer=False):
    """fn forward and backward on the CPU (the reference path): what the
    recorder needs to see every op call the CUDA run will make."""
    dtypes, M, C, n = case
    t = contract.make_inputs(fn, dtypes, M, C, n, "cpu", contract.seed_of(fn, case))
    buffer = contract.initial_buffer(fn, case, "cpu") if acc_buffer else None
    outs = contract.call(te, fn, t, n, buffer=buffer)
    torch.autograd.grad(outs, [v for v in t.values() if v is not None], [torch.ones_like(o) for o in outs],
                        allow_unused=acc_buffer)


@pytest.fixture(scope="module", autouse=True)
def kernels_built(tmp_path_factory, pytestconfig):
    """Every spec the module's cases request, built in parallel before the first test."""
    start = time.monotonic()
    calls = [functools.partial(dry_run, fn, c) for fn, c in CASES]
    calls += [functools.partial(dry_run, fn, same_bits_case(fn)) for fn in contract.AXES]
    calls += [functools.partial(dry_run, fn, c, True) for fn, c in contract.BUFFER_CASES]
    calls += [functools.partial(dry_run, fn, same_bits_case(fn), True) for fn in contract.BUFFER_FNS]
    specs = precompile.recorded_specs(calls, precompile.device_arch())
    recorded = time.monotonic() - start
    built, seconds = precompile.build(specs, tmp_path_factory.mktemp("kernels"))
    line = (f"precompile: {len(specs)} specs recorded in {recorded:.1f} s, {built} kernels built in "
            f"{seconds:.1f} s on {os.cpu_count()} cores")
    reporter = pytestconfig.pluginmanager.get_plugin("terminalreporter")
    if reporter:
        reporter.write_line(line)
    print(line)


def reference_expected(fn, M, C, n):
    """Whether a case may run the reference path (the documented reason)."""
    return M == 0


def reference_calls():
    torch.cuda.synchronize()
    return mhc._C.stats()["reference_calls"]


def te_compiles(fn, dtypes):
    """Whether TE main's Triton kernels compile for this dtype mix. Its
    expand_combine backward takes tl.dot of f, of bias (where given) and of x
    with the output gradient (x's dtype), which Triton refuses when their
    dtypes differ (CompilationError "Both operands must be same dtype. Got
    bf16 and fp32", seen on the H100): those cases check mhc alone, as
    without TE."""
    if fn != "mhc_fused_expand_combine":
        return True
    return len({dtypes.get("f"), dtypes.get("x"), dtypes.get("bias") or dtypes.get("x")}) == 1


@pytest.mark.parametrize("fn, case", CASES, ids=IDS)
def test_te_call_on_the_kernel_path(fn, case):
    dtypes, M, C, n = case
    before = reference_calls()
    t, outs, ups, grads = contract.run_case(fn, case, DEV)
    used = reference_calls() - before
    if not reference_expected(fn, M, C, n):
        assert used == 0, f"{fn} ({contract.case_id(case)}) ran the reference path {used} times"
    if TE is None or n != 4 or M == 0 or not te_compiles(fn, dtypes):
        return
    leaves = {k: v.detach().clone().requires_grad_() for k, v in t.items() if v is not None}
    te_inputs = {k: leaves.get(k) for k in t}
    te_outs = contract.call(TE, fn, te_inputs, n)
    te_grads = torch.autograd.grad(te_outs, list(leaves.values()), ups)
    tol = 2 * (contract.TOL[contract.BF16] if contract.BF16 in dtypes.values() else contract.TOL[contract.F32])
    for i, (a, b) in enumerate(zip(outs, te_outs)):
        assert (a.dtype, a.shape) == (b.dtype, b.shape), (fn, "output", i, a.dtype, a.shape, b.dtype, b.shape)
        e = contract.rel_err(a.detach(), b.detach().double())
        assert e <= tol, f"{fn} output {i}: mhc vs TE {e:.3g} > {tol:g} ({contract.case_id(case)})"
    for name, a, b in zip(leaves, grads, te_grads):
        assert (a.dtype, a.shape) == (b.dtype, b.shape), (fn, name, a.dtype, a.shape, b.dtype, b.shape)
        e = contract.rel_err(a, b.double())
        assert e <= tol, f"{fn} grad of {name}: mhc vs TE {e:.3g} > {tol:g} ({contract.case_id(case)})"


BUFFER_IDS = [f"{fn}-{contract.case_id(c)}" for fn, c in contract.BUFFER_CASES]


def te_buffer_run(fn, case, t, ups):
    """TE on the case's inputs with its own copy of the initial buffer:
    (outputs, gradients (x's None where TE returns none), buffer)."""
    leaves = {k: v.detach().clone().requires_grad_() for k, v in t.items() if v is not None}
    buffer = contract.initial_buffer(fn, case, DEV)
    te_outs = contract.call(TE, fn, {k: leaves.get(k) for k in t}, case[3], buffer=buffer)
    te_grads = torch.autograd.grad(te_outs, list(leaves.values()), ups, allow_unused=True)
    return te_outs, te_grads, buffer


@pytest.mark.parametrize("fn, case", contract.BUFFER_CASES, ids=BUFFER_IDS)
def test_te_call_with_buffer_on_the_kernel_path(fn, case):
    """fused_grad_x_acc_buffer on the kernels: the float64 checks of
    run_case, no reference call but the documented ones, and TE's results
    (its buffer where x's gradient is stored or added there)."""
    dtypes, M, C, n = case
    before = reference_calls()
    t, outs, ups, grads, buffer = contract.run_case(fn, case, DEV, acc_buffer=True)
    used = reference_calls() - before
    if not reference_expected(fn, M, C, n):
        assert used == 0, f"{fn} ({contract.case_id(case)}) with the buffer ran the reference path {used} times"
    if TE is None or n != 4 or M == 0 or not te_compiles(fn, dtypes):
        return
    te_outs, te_grads, te_buffer = te_buffer_run(fn, case, t, ups)
    tol = 2 * (contract.TOL[contract.BF16] if contract.BF16 in dtypes.values() else contract.TOL[contract.F32])
    pairs = [(f"output {i}", a, b) for i, (a, b) in enumerate(zip(outs, te_outs))]
    names = [k for k, v in t.items() if v is not None]
    pairs += [(f"grad of {k}", a, b) for k, a, b in zip(names, grads, te_grads) if k != "x"]
    if contract.BUFFER_FNS[fn] == "returned":
        pairs.append(("x's gradient", grads[names.index("x")], te_grads[names.index("x")]))
    else:
        assert te_grads[names.index("x")] is None, (fn, "TE returns no x gradient with the buffer")
        pairs.append(("the buffer", buffer, te_buffer))
    for what, a, b in pairs:
        assert (a.dtype, a.shape) == (b.dtype, b.shape), (fn, what, a.dtype, a.shape, b.dtype, b.shape)
        e = contract.rel_err(a.detach(), b.detach().double())
        assert e <= tol, f"{fn} {what} (buffer): mhc vs TE {e:.3g} > {tol:g} ({contract.case_id(case)})"


@pytest.mark.parametrize("fn", list(contract.BUFFER_FNS))
def test_buffer_same_inputs_same_bits(fn):
    """Twice the same call with the buffer: the same outputs, gradients and
    buffer bits (the in-place kernels read and write each element once)."""
    case = same_bits_case(fn)
    a = contract.run_case(fn, case, DEV, acc_buffer=True)
    b = contract.run_case(fn, case, DEV, acc_buffer=True)
    for u, v in zip((*a[1], *a[3], a[4]), (*b[1], *b[3], b[4])):
        assert (u is None and v is None) or torch.equal(u, v), fn


@pytest.mark.parametrize("fn", list(contract.AXES))
def test_same_inputs_same_bits(fn):
    """Twice the same call, forward and backward: the same bits (and with
    use_split_k=True for the functions that take it)."""
    case = same_bits_case(fn)
    a = contract.run_case(fn, case, DEV)
    b = contract.run_case(fn, case, DEV)
    for u, v in zip((*a[1], *a[3]), (*b[1], *b[3])):
        assert torch.equal(u, v), fn
    if fn in ("mhc_fused_projection", "mhc_generate_mix_and_aggregate"):
        split, plain = contract.call(te, fn, a[0], 4, split_k=True), contract.call(te, fn, a[0], 4)
        assert all(torch.equal(u, v) for u, v in zip(split, plain)), fn


def test_no_tokens_through_every_torch_op_on_cuda():
    """Every torch.ops.mhc op with M = 0 on CUDA: empty per-token outputs,
    zero parameter gradients (a sum over no tokens)."""
    for op, args in hardening.op_args(M=0, n=4, C=64).items():
        args = [a.to(DEV) if isinstance(a, torch.Tensor) else a for a in args]
        out = hardening.call_op(op, args)
        for o in out if isinstance(out, tuple) else (out,):
            assert o.device.type == DEV, op
            if o.dim() and o.shape[0] == 0:
                continue
            assert torch.equal(o, torch.zeros_like(o)), op


@pytest.mark.parametrize("lead", [(0,), (0, 3), (2, 0)])
def test_no_tokens_through_every_function_on_cuda(lead):
    """mhc.* with M = 0 on CUDA (bf16 x, f32 parameters), forward and
    backward: TE's and mhc's shapes, empty or zero gradients."""
    n, C = 4, 64
    x = torch.randn(*lead, n, C, device=DEV, dtype=torch.bfloat16, requires_grad=True)
    p = {k: v.to(DEV).requires_grad_() for k, v in hardening.params(n, C).items()}
    bias = torch.randn(C, device=DEV, requires_grad=True)
    h, ms = mhc.project(x, p["phi"], p["weight"])
    pre, post, L = mhc.scale(h, ms, p["alpha"], p["beta"])
    P = mhc.sinkhorn(L)
    y = mhc.aggregate(x, pre)
    out = mhc.expand_combine(y, post, x, P, bias)
    y2, post2, P2 = mhc.pre(x, p["phi"], p["alpha"], p["beta"], p["weight"])
    assert h.shape == (*lead, 24) and ms.shape == lead and L.shape == P.shape == P2.shape == (*lead, n, n)
    assert y.shape == y2.shape == (*lead, C) and post2.shape == (*lead, n) and out.shape == x.shape
    leaves = [x, bias, *p.values()]
    grads = torch.autograd.grad(out.float().sum() + y2.float().sum() + post2.sum() + P2.sum(), leaves)
    assert grads[0].shape == x.shape and grads[0].dtype == x.dtype
    for g, leaf in zip(grads[1:], leaves[1:]):
        assert torch.equal(g, torch.zeros_like(leaf))
