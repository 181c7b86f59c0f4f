"""bench/stack.py's harness on CPU with tiny shapes (the ATen reference, wall-clock times), so that the
GPU benchmark's code paths cannot rot between runs: the floor arithmetic, the saved-for-backward
accounting, a whole run (columns, rows, JSON, the printed table) and report.py's stack section."""

import copy
import json
import pathlib
import sys

import pytest
import torch

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import report  # noqa: E402
import stack  # noqa: E402


def test_floor_bytes_are_the_seams():
    fb = stack.floor_bytes(4, 3, 5)
    assert fb == dict(fwd=14 * 2 * 15, bwd=15 * 2 * 15, total=29 * 2 * 15)
    assert stack.floor_bytes(8, 1, 1, act_bytes=4) == dict(fwd=26 * 4, bwd=27 * 4, total=53 * 4)
    # 1.0 when the time is the bytes at the bandwidth; half as fast, 0.5; no time, no fraction.
    assert stack.floor_fraction(420, 1e9, 0.42) == pytest.approx(1.0)
    assert stack.floor_fraction(420, 1e9, 0.84) == pytest.approx(0.5)
    assert stack.floor_fraction(420, 1e9, 0.0) is None


def test_stack_floor_counts_its_first_pre_and_last_post():
    # n = 4: pre 9 + 3 seams of 14 + post 9 = 60 units over 4 layers; n = 1: (3 + 3 * 5 + 3) / 4.
    assert report.stack_fwd_floor_units(4) == 15
    assert report.stack_fwd_floor_units(1) == 21 / 4
    assert report.stack_fwd_floor_units(4, layers=2) == (9 + 14 + 9) / 2


def test_saved_bytes_count_each_storage_once_and_leave_parameters_out():
    w = torch.nn.Parameter(torch.randn(8))
    x = torch.randn(16, requires_grad=True)

    def f():
        a = x * x  # saves x twice: one storage
        v = x[:8] * w  # saves a view of x (x's storage again) and w (a parameter)
        return torch.exp(a).sum() + v.sum()  # exp saves its result: a second storage of 16 floats

    out, nbytes = stack.saved_storage_bytes(f, exclude=[w])
    assert nbytes == 2 * 16 * 4
    _, with_w = stack.saved_storage_bytes(f)
    assert with_w == 2 * 16 * 4 + 8 * 4
    out.backward()  # the hooks hand back what they were given
    want = 2 * x.detach() * torch.exp(x.detach() ** 2) + torch.cat([w.detach(), torch.zeros(8)])
    assert torch.allclose(x.grad, want)


def test_saved_bytes_leave_no_graph_alive():
    """The hooked forward runs no backward: its graph, saved outputs included, must go with its output
    (a pack hook that keeps the live tensor leaks the graph through a cycle gc cannot see)."""
    x = torch.randn(64, requires_grad=True)
    before = set(stack.live_tensors())
    for _ in range(3):
        out, nbytes = stack.saved_storage_bytes(lambda: torch.exp(x).sigmoid())  # both save their outputs
        assert nbytes == 2 * 64 * 4
        del out
    assert stack.left_alive(before) == (0, 0)


def test_left_alive_counts_what_a_column_keeps(monkeypatch, tmp_path):
    """A column that keeps its outputs is caught, in its row and its log line; the others are not."""
    kept = []
    column = stack.column

    def leaky(name, *args):
        run, leaves = column(name, *args)
        if name != "mhc unfused":
            return run, leaves

        def keeping(x):
            kept.append(run(x))
            return kept[-1]
        return keeping, leaves

    monkeypatch.setattr(stack, "column", leaky)
    result = stack.main(["--device", "cpu", "--no-compile", "--out", str(tmp_path), "--config", "identity,4,8",
                         "--columns", "mhc fused,mhc unfused"])
    by = {r["column"]: r for r in result["rows"]}
    assert by["mhc fused"]["left_tensors"] == 0
    assert by["mhc unfused"]["left_tensors"] >= len(kept) > 0
    assert by["mhc unfused"]["left_bytes"] >= 4 * 8 * 4 * 2
    assert "LEFT ALIVE" in stack.line(by["mhc unfused"]) and "LEFT ALIVE" not in stack.line(by["mhc fused"])


def cpu_run_of(main, name, configs, tmp_path_factory):
    """(result, output folder) of main's CPU smoke run of configs (no torch.compile) into a fresh folder,
    with torch on one thread: for tiny matrices one thread is quicker than waiting on busy cores.
    (test_bench_serve.py uses it too.)"""
    out = tmp_path_factory.mktemp(name)
    argv = ["--device", "cpu", "--no-compile", "--out", str(out)] + [v for c in configs for v in ("--config", c)]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return main(argv), out
    finally:
        torch.set_num_threads(threads)


def merged_results(tmp_path, merge, run_json, section):
    """docs/perf/results.json copied to tmp_path with run_json merged in by `merge` (report.py's merge
    arguments; setup mhc=abc1234), as a dict whose `section` carries that setup."""
    results = tmp_path / "results.json"
    results.write_text((ROOT / "docs" / "perf" / "results.json").read_text())
    merge([str(results), str(run_json), "--setup", "mhc=abc1234"])
    d = json.loads(results.read_text())
    assert d[section]["setup"] == {"mhc": "abc1234"}
    return d


def report_without(d, key):
    """The report's page of d with d[key] dropped."""
    without = copy.deepcopy(d)
    del without[key]
    return "\n".join(report.report(without))


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory):
    return cpu_run_of(stack.main, "stack", ("identity,8,16", "linear,8,16"), tmp_path_factory)


def test_cpu_run_rows(cpu_run):
    result, _ = cpu_run
    by = {(r["block"], r["column"]): r for r in result["rows"]}
    assert len(result["rows"]) == 2 * len(stack.COLUMNS)
    M, C, n = 8, 16, stack.STREAMS
    for block in ("identity", "linear"):
        for name in ("TE", "TE acc buffer"):
            assert by[(block, name)]["status"] == "absent: no TE checkout (--te)"
        for name in ("mhc fused", "mhc unfused", "mhc.te", "mhc.te acc buffer", "torch eager"):
            r = by[(block, name)]
            assert r["status"] == "ok" and r["fwd_us"] > 0 and r["total_us"] == r["fwd_us"] + r["bwd_us"]
            fb = stack.floor_bytes(n, M, C)
            mhc_part_s = (r["fwd_us"] - r["block_fwd_us"]) * 1e-6
            assert r["fwd_floor"] == pytest.approx(fb["fwd"] / result["copy_bandwidth"] / mhc_part_s)
            # Each layer keeps at least its input x_l for the backward; no CUDA, no held or peak bytes.
            assert r["saved_bytes"] >= M * C * n * 2
            assert r["held_bytes"] is None and r["peak_bytes"] is None
            # Same conventions in every column: mhc's stacks and the plain PyTorch one agree.
            assert r["diff_vs"] == "mhc fused" and r["max_rel_diff"] <= stack.AGREE
            # No column leaves a tensor alive for the next (on the GPU: memory the next would lack).
            assert (r["left_tensors"], r["left_bytes"]) == (0, 0)
    assert by[("identity", "torch eager")]["block_fwd_us"] == 0.0
    assert by[("linear", "torch eager")]["block_fwd_us"] > 0.0


def test_cpu_run_json_and_table(cpu_run, capsys):
    result, out = cpu_run
    assert json.loads((out / "stack.json").read_text()) == json.loads(json.dumps(result))
    text = stack.table(result["rows"], result["copy_bandwidth"])
    lines = text.splitlines()
    assert sum(line == stack.TABLE_HEADER for line in lines) == 2
    w = stack.NAME_W
    assert sum(line.startswith(f"{'TE':{w}s} absent: no TE checkout") for line in lines) == 2
    for name in ("mhc fused", "mhc unfused", "mhc.te", "mhc.te acc buffer", "torch eager"):
        assert sum(line.startswith(f"{name:{w}s} ") and "absent" not in line for line in lines) == 2
    assert "block alone: fwd" in text  # the linear block's own time, once


def test_report_renders_the_stack_section(cpu_run, tmp_path):
    result, out = cpu_run
    d = merged_results(tmp_path, report.merge_stack, out / "stack.json", "stack")
    page = "\n".join(report.report(d))
    assert "## A 4-layer stack" in page and "mhc abc1234" in page
    assert "### identity block, M = 8, C = 16" in page and "### linear block" in page
    assert "| TE | absent |" in page
    # The targets need the M = 32768 rows this run lacks: each says so rather than failing.
    assert "| forward per layer <= 1.1x the floor (the stack's: its seams' and its first pre / last post step's) | -; - | - |" in page
    assert "A 4-layer stack" not in report_without(d, "stack")
