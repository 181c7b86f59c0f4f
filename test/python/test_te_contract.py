"""Transformer Engine's mHC contract as mhc.te meets it, without TE.

The contract is TE main's transformer_engine/pytorch/triton/mhc.py (PR #2978):
its functions' names, arguments, docstrings and checks. For every function,
every dtype combination its docstrings allow, n = 4 (and n = 1..8, mhc's
extension where TE asserts n = 4), M in {0, 1, 7, 300} and C in {32, 4096,
5129}, forward and backward: outputs and gradients in TE's dtypes and shapes,
values against a float64 evaluation of SPEC.md (mhc.reference) with TE's
tolerances (bf16 2.5e-2, fp32 1e-5, without TF32). The functions that take
TE's fused_grad_x_acc_buffer run the same cases with it too (BUFFER_CASES):
x's gradient is then in the buffer (expand_combine: stored, aggregate: added)
or returned by the projection (the buffer plus its own, in x's dtype).

The (dtypes, M, C) matrix is sampled deterministically (cases()): every
function x dtype combination once, every (M, C) at least once per function.
test/gpu/test_te_contract_gpu.py runs the same cases on CUDA through these
helpers.
"""

import importlib
import itertools
import random
import zlib

import pytest
import torch

from mhc import reference as ref
from mhc import te

BF16, F32 = torch.bfloat16, torch.float32
ACT, OPT = (BF16, F32), (None, BF16, F32)  # TE's docstrings: "bfloat16 or float32" (optional: or None)
TOL = {BF16: 2.5e-2, F32: 1e-5}
FLT_EPSILON = torch.finfo(torch.float32).eps
MS = (0, 1, 7, 300)
CS = (32, 4096, 5129)
LEAD = {0: (0, 2), 1: (1, 1), 7: (7, 1), 300: (150, 2)}  # M = s * b, as (s, b)

# Each function's dtype axes (its tensor arguments, TE's names) and whether it has a C.
AXES = {
    "mhc_fused_projection": dict(x=ACT, phi=ACT, norm_weight=OPT),
    "mhc_fused_scale": dict(H=ACT, ms=ACT, alpha=ACT, beta=ACT),
    "mhc_fused_sinkhorn": dict(H_res=ACT),
    "mhc_fused_aggregate": dict(x=ACT, H_pre=ACT),
    "mhc_fused_expand_combine": dict(f=ACT, bias=OPT, H_post=ACT, x=ACT, H_res=ACT),
    "mhc_generate_mix_and_aggregate": dict(x=ACT, phi=ACT, alpha=ACT, beta=ACT, norm_weight=OPT),
}
HAS_C = {"mhc_fused_projection", "mhc_fused_aggregate", "mhc_fused_expand_combine",
         "mhc_generate_mix_and_aggregate"}


def cases(fn, cs=CS, ms=MS):
    """(dtypes, M, C, n) for fn: each dtype combination once, each (M, C)
    at least once (a fixed shuffle pairs them; combinations beyond the
    shapes' count take the cheap shapes, M <= 7 or C = 32), then n = 1..8 but
    4 once each at M = 7, C = 32; and float32 throughout at the largest M
    and aligned C. C is None where fn has none."""
    combos = [dict(zip(AXES[fn], c)) for c in itertools.product(*AXES[fn].values())]
    shapes = list(itertools.product(ms, cs if fn in HAS_C else (None,)))
    random.Random(fn).shuffle(shapes)
    # Each shape once, then the combinations left over at the cheap shapes.
    cheap = [(M, C) for M, C in shapes if M <= 7 or (C or 0) <= 32]
    out = [(combos[i % len(combos)], *(shapes[i] if i < len(shapes) else cheap[i % len(cheap)]), 4)
           for i in range(max(len(combos), len(shapes)))]
    # float32 throughout (fp32's 1e-5) at the largest M and aligned C too.
    strict = (dict.fromkeys(AXES[fn], F32), max(ms), max(c for c in cs if c % 8 == 0) if fn in HAS_C else None, 4)
    if strict not in out:
        out.append(strict)
    for i, n in enumerate((1, 2, 3, 5, 6, 7, 8)):
        out.append((combos[(3 * i + 1) % len(combos)], 7, 32 if fn in HAS_C else None, n))
    return out


def case_id(case):
    dtypes, M, C, n = case
    d = "-".join(f"{k}:{str(v).replace('torch.', '').replace('bfloat16', 'bf16').replace('float32', 'f32')}"
                 for k, v in dtypes.items())
    return f"{d}-M{M}" + (f"-C{C}" if C else "") + f"-n{n}"


def make_inputs(fn, dtypes, M, C, n, device, seed):
    """fn's tensor arguments in TE's shapes and the case's dtypes (None: an
    absent optional one), leaves that require grad; values drawn in float32
    on the CPU and cast, so every implementation and the oracle see the same."""
    gen = torch.Generator().manual_seed(seed)
    lead, N, K = LEAD[M], 2 * n + n * n, n * (C or 1)

    def draw(shape, scale=1.0, shift=0.0, positive=False):
        t = torch.rand(shape, generator=gen) if positive else torch.randn(shape, generator=gen)
        return t * scale + shift

    C1 = C or 1
    values = {  # drawn in the order of fn's arguments, only those it takes
        "x": lambda: draw((M, K)) if fn == "mhc_fused_projection" else draw((*lead, C, n)),
        "phi": lambda: draw((N, K), K ** -0.5), "norm_weight": lambda: draw((K,), 0.1, 1.0),
        "alpha": lambda: draw((3,), 1.0, 0.5, positive=True), "beta": lambda: draw((1, N), 0.1),
        "H": lambda: draw((M, max(N, 32))), "ms": lambda: draw((M,), 1.0, 0.5, positive=True),
        "H_res": lambda: (draw((*lead, n, n)) if fn == "mhc_fused_sinkhorn"
                          else draw((*lead, n, n), 1.0, positive=True)),
        "H_pre": lambda: draw((*lead, n), positive=True), "H_post": lambda: draw((*lead, n), 2.0, positive=True),
        "f": lambda: draw((*lead, C1)), "bias": lambda: draw((C1,), 0.1),
    }
    return {k: (values[k]().to(device=device, dtype=d).requires_grad_() if d is not None else None)
            for k, d in dtypes.items()}


def call(module, fn, t, n, tf32=False, split_k=False, buffer=None):
    """fn of `module` (mhc.te or TE's) on the inputs t; its outputs as a tuple.
    `buffer`: TE's fused_grad_x_acc_buffer, for the functions that take it."""
    f = getattr(module, fn)
    acc = {} if buffer is None else {"fused_grad_x_acc_buffer": buffer}
    if fn == "mhc_fused_projection":
        return tuple(f(t["x"], t["phi"], use_tf32=tf32, norm_weight=t["norm_weight"], use_split_k=split_k, **acc))
    if fn == "mhc_fused_scale":
        return tuple(f(t["H"], t["alpha"], t["beta"], t["ms"], n))
    if fn == "mhc_fused_sinkhorn":
        return (f(t["H_res"], n),)
    if fn == "mhc_fused_aggregate":
        return (f(t["x"], t["H_pre"], n, use_tf32=tf32, **acc),)
    if fn == "mhc_fused_expand_combine":
        return (f(t["f"], t["bias"], t["H_post"], t["x"], t["H_res"], n, use_tf32=tf32, **acc),)
    return tuple(f(t["x"], t["phi"], t["alpha"], t["beta"], t["norm_weight"], use_tf32=tf32, use_split_k=split_k,
                   **acc))


def _te_scale(h, ms, alpha, beta, n):
    return ref.scale(h, ms, alpha, beta.reshape(-1), n, FLT_EPSILON, 0.0, 2.0)


def oracle(fn, t, n):
    """SPEC.md in float64 with TE's constants (norm_eps = FLT_EPSILON, no
    pre eps, post x 2, log Sinkhorn, 20 iterations): fn's outputs in TE's
    shapes (H padded with zeros to 32 columns)."""
    N = 2 * n + n * n
    if fn == "mhc_fused_projection":
        h, ms = ref.project(t["x"], t["phi"], t["norm_weight"])
        return torch.nn.functional.pad(h, (0, max(N, 32) - N)), ms
    if fn == "mhc_fused_scale":
        pre, post, L = _te_scale(t["H"][:, :N], t["ms"], t["alpha"], t["beta"], n)
        return pre, post, L.reshape(L.shape[0], n * n)
    if fn == "mhc_fused_sinkhorn":
        return (ref.sinkhorn(t["H_res"], "log", 20),)
    x = t["x"]
    lead, C, M = x.shape[:-2], x.shape[-2], x.shape[:-2].numel()
    xs = x.reshape(M, C, n)
    if fn == "mhc_fused_aggregate":
        return (ref.aggregate(xs, t["H_pre"].reshape(M, n), "cn").reshape(*lead, C),)
    if fn == "mhc_fused_expand_combine":
        out = ref.expand_combine(t["f"].reshape(M, C), t["H_post"].reshape(M, n), xs,
                                 t["H_res"].reshape(M, n, n), t["bias"], "cn")
        return (out.reshape(x.shape),)
    h, ms = ref.project(xs, t["phi"], t["norm_weight"])
    pre, post, L = _te_scale(h, ms, t["alpha"], t["beta"], n)
    return (ref.aggregate(xs, pre, "cn").reshape(*lead, C), post.reshape(*lead, n),
            ref.sinkhorn(L, "log", 20).reshape(*lead, n, n))


def te_dtypes(fn, dtypes):
    """The outputs' dtypes as TE's docstrings give them."""
    return {"mhc_fused_projection": (F32, F32),
            "mhc_fused_scale": (dtypes.get("H"),) * 3,
            "mhc_fused_sinkhorn": (dtypes.get("H_res"),),
            "mhc_fused_aggregate": (dtypes.get("x"),),
            "mhc_fused_expand_combine": (dtypes.get("x"),),
            "mhc_generate_mix_and_aggregate": (dtypes.get("x"), F32, F32)}[fn]


def te_shapes(fn, t, n):
    """The outputs' shapes as TE returns them (H (M, 32) for n <= 4)."""
    N = 2 * n + n * n
    if fn == "mhc_fused_projection":
        M = t["x"].shape[0]
        return (M, max(N, 32)), (M,)
    if fn == "mhc_fused_scale":
        M = t["H"].shape[0]
        return (M, n), (M, n), (M, n * n)
    if fn == "mhc_fused_sinkhorn":
        return (tuple(t["H_res"].shape),)
    lead, C = tuple(t["x"].shape[:-2]), t["x"].shape[-2]
    if fn == "mhc_fused_aggregate":
        return ((*lead, C),)
    if fn == "mhc_fused_expand_combine":
        return (tuple(t["x"].shape),)
    return (*lead, C), (*lead, n), (*lead, n, n)


def rel_err(got, want):
    """max |got - want| / max |want| (want == 0 everywhere: max |got|)."""
    if want.numel() == 0:
        return 0.0
    d = (got.double() - want).abs().max().item()
    return d / max(want.abs().max().item(), 1e-12)


def seed_of(fn, case):
    return zlib.crc32(repr((fn, case_id(case))).encode())


# The functions that take TE's fused_grad_x_acc_buffer, and how x's gradient comes back with it: "stored"
# (buffer = its own), "added" (buffer += its own; both return none for x), "returned" (x's gradient is the buffer
# plus its own, in x's dtype: the projection, and the composed pre step, whose aggregate's part is added where
# the projection reads the buffer).
BUFFER_FNS = {"mhc_fused_projection": "returned", "mhc_fused_aggregate": "added",
              "mhc_fused_expand_combine": "stored", "mhc_generate_mix_and_aggregate": "returned"}


def initial_buffer(fn, case, device):
    """A float32 buffer of x.numel() values (flat: TE checks numel only), not zero."""
    dtypes, M, C, n = case
    gen = torch.Generator().manual_seed(seed_of(fn, case) + 2)
    return torch.randn(M * n * C, generator=gen).to(device)


def check_buffer_grad(fn, case, t, grads, buffer, buffer0, want_x, tol):
    """x's gradient with the buffer: in the buffer, or returned, as BUFFER_FNS says."""
    how = BUFFER_FNS[fn]
    gx = grads[list(k for k, v in t.items() if v is not None).index("x")]
    if how == "returned":
        # (mhc reads the buffer here and leaves it as it was; TE's stores the sum: docs/MATH.md, "acc=f32")
        assert torch.equal(buffer, buffer0), f"{fn}: the buffer changed"
        got, want = gx, buffer0.double().cpu().view(want_x.shape) + want_x
    else:
        assert gx is None, f"{fn}: x's gradient is in the buffer, none returned"
        assert buffer.dtype == F32 and buffer.shape == buffer0.shape
        got = buffer.view(want_x.shape)
        want = want_x + (buffer0.double().cpu().view(want_x.shape) if how == "added" else 0)
    e = rel_err(got.detach().cpu(), want.detach())
    assert e <= tol, f"{fn} x's gradient ({how}, buffer): rel. error {e:.3g} > {tol:g} ({case_id(case)})"


def run_case(fn, case, device, module=te, acc_buffer=False):
    """Runs one case forward and backward through `module`; checks TE's
    dtypes and shapes and the values against the float64 oracle. Returns the
    inputs, outputs, upstream gradients and input gradients. `acc_buffer`:
    with TE's fused_grad_x_acc_buffer (then also returns the buffer)."""
    dtypes, M, C, n = case
    t = make_inputs(fn, dtypes, M, C, n, device, seed_of(fn, case))
    tol = TOL[BF16] if BF16 in dtypes.values() else TOL[F32]
    buffer0 = initial_buffer(fn, case, device) if acc_buffer else None
    buffer = buffer0.clone() if acc_buffer else None
    outs = call(module, fn, t, n, buffer=buffer)
    assert tuple(o.dtype for o in outs) == te_dtypes(fn, dtypes), fn
    assert tuple(tuple(o.shape) for o in outs) == te_shapes(fn, t, n), fn
    assert all(o.device == torch.device(device) or o.device.type == device for o in outs)
    if fn == "mhc_fused_projection":
        N = 2 * n + n * n
        assert torch.all(outs[0][:, N:] == 0), "H's padding columns are zero, as TE's"

    gen = torch.Generator().manual_seed(seed_of(fn, case) + 1)
    ups = [torch.randn(o.shape, generator=gen).to(device=device, dtype=o.dtype) for o in outs]
    leaves = {k: v for k, v in t.items() if v is not None}
    grads = torch.autograd.grad(outs, list(leaves.values()), ups, allow_unused=acc_buffer)
    for (name, leaf), g in zip(leaves.items(), grads):
        if g is None and acc_buffer and name == "x":
            continue  # (checked below)
        assert g.dtype == leaf.dtype and g.shape == leaf.shape, (fn, name, g.dtype, g.shape)

    t64 = {k: (v.detach().double().cpu().requires_grad_() if v is not None else None) for k, v in t.items()}
    want = oracle(fn, t64, n)
    want_grads = torch.autograd.grad(want, [t64[k] for k in leaves], [u.double().cpu() for u in ups])
    for i, (o, w) in enumerate(zip(outs, want)):
        e = rel_err(o.detach().cpu(), w.detach())
        assert e <= tol, f"{fn} output {i}: rel. error {e:.3g} > {tol:g} ({case_id(case)})"
    for name, g, w in zip(leaves, grads, want_grads):
        if acc_buffer and name == "x":
            check_buffer_grad(fn, case, t, grads, buffer, buffer0, w, tol)
            continue
        e = rel_err(g.cpu(), w)
        assert e <= tol, f"{fn} grad of {name}: rel. error {e:.3g} > {tol:g} ({case_id(case)})"
    return (t, outs, ups, grads, buffer) if acc_buffer else (t, outs, ups, grads)


ALL_CASES = [(fn, c) for fn in AXES for c in cases(fn)]
BUFFER_CASES = [(fn, c) for fn, c in ALL_CASES if fn in BUFFER_FNS]


@pytest.mark.parametrize("fn, case", ALL_CASES, ids=[f"{fn}-{case_id(c)}" for fn, c in ALL_CASES])
def test_te_call_matches_spec_in_tes_dtypes_and_shapes(fn, case):
    run_case(fn, case, "cpu")


@pytest.mark.parametrize("fn, case", BUFFER_CASES, ids=[f"{fn}-{case_id(c)}" for fn, c in BUFFER_CASES])
def test_te_call_with_fused_grad_x_acc_buffer(fn, case):
    run_case(fn, case, "cpu", acc_buffer=True)


def test_matrix_covers_every_dtype_combination_and_shape():
    for fn, axes in AXES.items():
        got = cases(fn)
        combos = {tuple(d.values()) for d, *_ in got}
        assert combos == set(itertools.product(*axes.values())), fn
        assert {(M, C) for _, M, C, n in got if n == 4} == set(itertools.product(MS, CS if fn in HAS_C else (None,)))
        assert {n for *_, n in got} == set(range(1, 9))


# --- M = 0 through TE's shapes, forward and backward -----------------------------

@pytest.mark.parametrize("lead", [(0,), (0, 2), (2, 0)])
def test_no_tokens_through_every_te_function(lead):
    """(s, b) with s or b = 0: empty outputs in TE's shapes, empty gradients
    for per-token inputs, zeros for the parameters; H_res as (M, n*n) too."""
    n, C = 4, 8
    M = 0
    x = torch.randn(*lead, C, n, requires_grad=True)
    phi = torch.randn(24, n * C, requires_grad=True)
    alpha, beta = torch.rand(3, requires_grad=True), torch.randn(1, 24, requires_grad=True)
    w = torch.randn(n * C, requires_grad=True)
    H, ms = te.mhc_fused_projection(x.reshape(M, n * C), phi, norm_weight=w)
    pre, post, res = te.mhc_fused_scale(H, alpha, beta, ms, n)
    assert H.shape == (0, 32) and ms.shape == (0,) and res.shape == (0, n * n)
    P_flat = te.mhc_fused_sinkhorn(res, n)
    P = te.mhc_fused_sinkhorn(res.view(*lead, n, n), n)
    y = te.mhc_fused_aggregate(x, pre.view(*lead, n), n)
    out = te.mhc_fused_expand_combine(y, torch.zeros(C, requires_grad=True), post.view(*lead, n), x, P, n)
    y2, post2, P2 = te.mhc_generate_mix_and_aggregate(x, phi, alpha, beta, w)
    assert P_flat.shape == (0, n * n) and P.shape == (*lead, n, n)
    assert y.shape == y2.shape == (*lead, C) and out.shape == x.shape
    assert post2.shape == (*lead, n) and P2.shape == (*lead, n, n)
    total = out.sum() + y2.sum() + post2.sum() + P2.sum() + P_flat.sum()
    gx, gphi, galpha, gbeta, gw = torch.autograd.grad(total, [x, phi, alpha, beta, w])
    assert gx.shape == x.shape
    for g in (gphi, galpha, gbeta, gw):
        assert torch.equal(g, torch.zeros_like(g))


# --- TE's arguments and names ----------------------------------------------------

def test_tes_names_are_exported():
    for name in ("mhc_fused_projection", "mhc_fused_scale", "mhc_fused_sinkhorn", "mhc_fused_aggregate",
                 "mhc_fused_expand_combine", "mhc_generate_mix_and_aggregate", "ENFORCE_DETERMINISTIC",
                 "check_deterministic", "mHCProjectionOp", "mHCScaleFusedOp", "mHCSinkhornOp", "mHCAggregateOp",
                 "mHCExpandCombineOp"):
        assert hasattr(te, name), name
    assert isinstance(te.ENFORCE_DETERMINISTIC, bool)


def test_autograd_operator_names_apply_as_tes():
    """TE's *Op.apply(...) with its positional arguments: the functions'
    results; mHCScaleFusedOp's is TE's (M, 32) [H_pre | H_post | H_res | pad]."""
    n, C, s, b = 4, 8, 3, 2
    x = torch.randn(s, b, C, n)
    phi, w = torch.randn(24, n * C) / 6, torch.rand(n * C) + 0.5
    alpha, beta = torch.rand(3) + 0.5, 0.1 * torch.randn(1, 24)
    H, ms = te.mHCProjectionOp.apply(x.view(s * b, C * n), phi, w, False, None, False)
    H2, ms2 = te.mhc_fused_projection(x.view(s * b, C * n), phi, False, w)
    assert torch.equal(H, H2) and torch.equal(ms, ms2)
    out = te.mHCScaleFusedOp.apply(H, alpha, beta, ms, n)
    pre, post, res = te.mhc_fused_scale(H, alpha, beta, ms, n)
    assert out.shape == (s * b, 32) and torch.equal(out[:, :24], torch.cat([pre, post, res], 1))
    P = te.mHCSinkhornOp.apply(res.view(s, b, n, n), n, False, 20)
    assert torch.equal(P, te.mhc_fused_sinkhorn(res.view(s, b, n, n), n))
    y = te.mHCAggregateOp.apply(x, pre.view(s, b, n), n, True, None)
    assert torch.equal(y, te.mhc_fused_aggregate(x, pre.view(s, b, n), n))
    z = te.mHCExpandCombineOp.apply(y, None, post.view(s, b, n), x, P, n, True, None)
    assert torch.equal(z, te.mhc_fused_expand_combine(y, None, post.view(s, b, n), x, P, n))


@pytest.mark.parametrize("flag", ["0", "1"])
def test_split_k_and_the_determinism_switch_change_nothing(monkeypatch, flag):
    """NVTE_ALLOW_NONDETERMINISTIC_ALGO is read at import into
    ENFORCE_DETERMINISTIC, as TE does; use_split_k=True never raises (mhc's
    reductions are fixed-order) and gives the same bits."""
    monkeypatch.setenv("NVTE_ALLOW_NONDETERMINISTIC_ALGO", flag)
    module = importlib.reload(te)
    try:
        assert module.ENFORCE_DETERMINISTIC is (flag == "0")
        module.check_deterministic("mhc_fused_projection", use_split_k=True)
        n, C = 4, 16
        x = torch.randn(3, 2, C, n)
        phi, alpha, beta = torch.randn(24, n * C) / 8, torch.rand(3) + 0.5, 0.1 * torch.randn(1, 24)
        a = module.mhc_fused_projection(x.view(6, n * C), phi, use_split_k=True)
        b = module.mhc_fused_projection(x.view(6, n * C), phi, use_split_k=False)
        assert all(torch.equal(u, v) for u, v in zip(a, b))
        a = module.mhc_generate_mix_and_aggregate(x, phi, alpha, beta, use_split_k=True)
        b = module.mhc_generate_mix_and_aggregate(x, phi, alpha, beta)
        assert all(torch.equal(u, v) for u, v in zip(a, b))
    finally:
        monkeypatch.undo()
        importlib.reload(te)


def test_sinkhorn_iters_and_recompute_hist():
    """iters is the number of iterations (TE's kernels assume >= 1: 0 is an
    error naming it); recompute_hist changes nothing but memory."""
    L = torch.randn(5, 2, 4, 4, dtype=torch.float64)
    for iters in (1, 3, 50):
        got = te.mhc_fused_sinkhorn(L, 4, recompute_hist=False, iters=iters)
        assert torch.allclose(got, ref.sinkhorn(L, "log", iters), rtol=0, atol=1e-12)
        assert torch.equal(got, te.mhc_fused_sinkhorn(L, 4, True, iters))
    with pytest.raises(ValueError, match="iters must be >= 1; got 0"):
        te.mhc_fused_sinkhorn(L, 4, iters=0)


def test_h_is_padded_to_32_columns_where_te_pads_it():
    """The projection's H is (M, 32) for n <= 4 (TE's layout, zeros past N),
    (M, N) for n >= 5; mhc_fused_scale reads the first N columns of either."""
    for n in range(1, 9):
        N, C = 2 * n + n * n, 8
        x, phi = torch.randn(5, n * C), torch.randn(N, n * C)
        H, ms = te.mhc_fused_projection(x, phi)
        assert H.shape == (5, 32 if N <= 32 else N)
        alpha, beta = torch.rand(3) + 0.5, torch.randn(1, N)
        padded = te.mhc_fused_scale(H, alpha, beta, ms, n)
        bare = te.mhc_fused_scale(H[:, :N].contiguous(), alpha, beta, ms, n)
        assert all(torch.equal(u, v) for u, v in zip(padded, bare))


def test_n_is_checked_against_the_shapes():
    x, C = torch.randn(3, 2, 8, 4), 8
    with pytest.raises(ValueError, match=r"mhc_fused_aggregate: argument 'n' is 3 but 'x' has 4 streams"):
        te.mhc_fused_aggregate(x, torch.rand(3, 2, 3), 3)
    with pytest.raises(ValueError, match=r"mhc_fused_expand_combine: argument 'n' is 2 but 'x' has 4 streams"):
        te.mhc_fused_expand_combine(torch.randn(3, 2, C), None, torch.rand(3, 2, 2), x, torch.rand(3, 2, 2, 2), 2)
    with pytest.raises(ValueError, match=r"mhc_fused_sinkhorn: argument 'n' is 4 but 'H_res' is not"):
        te.mhc_fused_sinkhorn(torch.randn(3, 2, 3, 3))
    with pytest.raises(ValueError, match=r"mhc_fused_scale: argument 'H' has 24 columns; n = 5 needs"):
        te.mhc_fused_scale(torch.randn(6, 24), torch.rand(3), torch.rand(1, 35), torch.rand(6), 5)
    with pytest.raises(ValueError, match=r"mhc_fused_scale: argument 'beta' must have 2n \+ n\^2 = 24"):
        te.mhc_fused_scale(torch.randn(6, 32), torch.rand(3), torch.rand(1, 15), torch.rand(6), 4)
    with pytest.raises(ValueError, match=r"mhc_fused_projection: argument 'phi' has 20 rows"):
        te.mhc_fused_projection(torch.randn(6, 32), torch.randn(20, 32))
    with pytest.raises(ValueError, match=r"mhc_fused_projection: argument 'x' has 30 columns, not a multiple"):
        te.mhc_fused_projection(torch.randn(6, 30), torch.randn(24, 30))
    with pytest.raises(ValueError, match=r"mhc_fused_aggregate: argument 'n' must be >= 1 and <= 1024; got 0"):
        te.mhc_fused_aggregate(torch.randn(3, 8, 0), torch.rand(3, 0), 0)
    with pytest.raises(TypeError, match=r"argument 'n' must be an integer; got 4.0"):
        te.mhc_fused_aggregate(x, torch.rand(3, 2, 4), 4.0)


def test_other_arguments_are_named_in_tes_terms():
    x, C, n = torch.randn(3, 2, 8, 4), 8, 4
    with pytest.raises(ValueError, match=r"argument 'H_pre' must have shape \(3, 2, 4\); got \(3, 4\)"):
        te.mhc_fused_aggregate(x, torch.rand(3, 4), n)
    with pytest.raises(ValueError, match=r"argument 'f' must have shape \(3, 2, 8\)"):
        te.mhc_fused_expand_combine(torch.randn(3, 2, 9), None, torch.rand(3, 2, n), x, torch.rand(3, 2, n, n), n)
    with pytest.raises(ValueError, match=r"argument 'bias' must have shape \(8,\); got \(9,\)"):
        te.mhc_fused_expand_combine(torch.randn(3, 2, C), torch.randn(9), torch.rand(3, 2, n), x,
                                    torch.rand(3, 2, n, n), n)
    with pytest.raises(ValueError, match=r"argument 'H_post' must have shape \(3, 2, 4\); got NoneType"):
        te.mhc_fused_expand_combine(torch.randn(3, 2, C), None, None, x, torch.rand(3, 2, n, n), n)
    with pytest.raises(ValueError, match=r"argument 'x' must be \(M, n\*C\)"):
        te.mhc_fused_projection(x, torch.randn(24, 32))


@pytest.mark.parametrize("fn", list(BUFFER_FNS))
def test_fused_grad_x_acc_buffer_is_checked_as_tes(fn):
    """TE's checks of the buffer (float32, x.numel() values) raise naming
    the argument; a buffer of x's shape is as good as a flat one."""
    n, C = 4, 8
    x = torch.randn(3, 2, C, n)
    phi, alpha, beta = torch.randn(24, n * C), torch.rand(3), torch.rand(1, 24)

    def call_with(buf):
        return {
            "mhc_fused_projection": lambda: te.mhc_fused_projection(x.view(6, n * C), phi,
                                                                    fused_grad_x_acc_buffer=buf),
            "mhc_fused_aggregate": lambda: te.mhc_fused_aggregate(x, torch.rand(3, 2, n), n,
                                                                  fused_grad_x_acc_buffer=buf),
            "mhc_fused_expand_combine": lambda: te.mhc_fused_expand_combine(
                torch.randn(3, 2, C), None, torch.rand(3, 2, n), x, torch.rand(3, 2, n, n), n,
                fused_grad_x_acc_buffer=buf),
            "mhc_generate_mix_and_aggregate": lambda: te.mhc_generate_mix_and_aggregate(
                x, phi, alpha, beta, fused_grad_x_acc_buffer=buf),
        }[fn]()

    with pytest.raises(ValueError, match=rf"mhc.te.{fn}: argument 'fused_grad_x_acc_buffer' must be a float32"):
        call_with(torch.zeros(x.numel(), dtype=BF16))
    with pytest.raises(ValueError, match=rf"mhc.te.{fn}: argument 'fused_grad_x_acc_buffer' must be .*x.numel"):
        call_with(torch.zeros(x.numel() + 1))
    call_with(torch.zeros(x.shape))


def test_buffer_ops_mutate_their_buffer_and_check_it():
    """torch.ops.mhc.*_backward_into write the buffer they are given (in
    place, the same storage) and name a wrong one."""
    M, C, n = 5, 8, 4
    x, gy, pre = torch.randn(M, C, n, dtype=BF16), torch.randn(M, C, dtype=BF16), torch.rand(M, n)
    buf = torch.randn(M, C, n)
    before, ptr = buf.clone(), buf.data_ptr()
    gpre = torch.ops.mhc.aggregate_backward_into(gy, x, pre, n, "cn", buffer=buf)
    own = (pre[:, None, :] * gy.float()[:, :, None])
    assert buf.data_ptr() == ptr and torch.allclose(buf, before + own, atol=1e-6)
    assert gpre.shape == pre.shape and gpre.dtype == pre.dtype
    with pytest.raises(ValueError, match=r"mhc.aggregate_backward_into: 'buffer' \(the f32 x-gradient buffer\) "
                                         r"must be a contiguous torch.float32 tensor of shape \[5, 8, 4\]"):
        torch.ops.mhc.aggregate_backward_into(gy, x, pre, n, "cn", buffer=torch.zeros(M, C, n, dtype=BF16))
    with pytest.raises(ValueError, match=r"'buffer' shares memory with input 'x'"):
        x32 = torch.randn(M, C, n)
        torch.ops.mhc.aggregate_backward_into(gy.float(), x32, pre, n, "cn", buffer=x32)


def test_te_calls_trace_with_torch_compile_fullgraph():
    """A TE layer (bf16 x and beta, fp32 phi and alpha) through
    torch.compile(fullgraph=True): no graph break in mhc.te, the eager bits."""
    s, b, C, n = 3, 2, 16, 4
    x = torch.randn(s, b, C, n, dtype=BF16, requires_grad=True)
    phi, alpha = torch.randn(24, n * C) / 8, torch.rand(3) + 0.5
    beta = (0.1 * torch.randn(1, 24)).to(BF16)

    def layer(x):
        H, ms = te.mhc_fused_projection(x.view(s * b, C * n), phi)
        pre, post, res = te.mhc_fused_scale(H.to(BF16), alpha, beta, ms, n)
        P = te.mhc_fused_sinkhorn(res.view(s, b, n, n), n)
        y = te.mhc_fused_aggregate(x, pre.view(s, b, n), n)
        y2, post2, P2 = te.mhc_generate_mix_and_aggregate(x, phi, alpha, beta)
        return te.mhc_fused_expand_combine(torch.tanh(y), None, post.view(s, b, n), x, P, n), y2, post2, P2

    eager = layer(x)
    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")(x)
    assert all(torch.equal(u, v) for u, v in zip(eager, compiled))
