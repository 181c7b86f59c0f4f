"""bench/serve.py's harness on CPU with tiny shapes (the ATen reference, wall-clock times, no CUDA graphs),
so that the GPU benchmark's code paths cannot rot between runs: the columns' chains, a whole run (rows,
JSON, the printed table) and report.py's serve section."""

import json
import pathlib
import sys

import pytest
import torch

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import report  # noqa: E402
import serve  # noqa: E402

sys.path.insert(0, str(ROOT / "test" / "python"))
from test_bench_stack import cpu_run_of, merged_results, report_without  # noqa: E402  (not its tests)


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory):
    return cpu_run_of(serve.main, "serve", ("1,16", "5,24"), tmp_path_factory)


def test_cpu_run_rows(cpu_run):
    result, _ = cpu_run
    by = {(r["M"], r["column"]): r for r in result["rows"]}
    assert len(result["rows"]) == 2 * len(serve.COLUMNS)
    for M in (1, 5):
        assert by[(M, "TE")]["status"] == "absent: no TE checkout (--te)"
        for name in ("mhc fused", "mhc post_pre", "mhc unfused", "torch eager"):
            r = by[(M, name)]
            assert r["status"] == "ok" and r["eager_us"] > 0 and r["graph_us"] is None, r
            assert r["diff_vs"] == "mhc fused" and r["max_rel_diff"] <= serve.AGREE
        # The same ops on the same inputs: the out= seam is the training seam's bits, and post then pre's.
        assert by[(M, "mhc post_pre")]["max_rel_diff"] == 0.0
        assert by[(M, "mhc unfused")]["max_rel_diff"] == 0.0


def test_chains_write_the_preallocated_outputs():
    """mhc fused's chain returns its last seam's out= tensors, the same ones every call."""
    p = {k: v.detach() for k, v in serve.stack.layer_params(16, torch.device("cpu"), seed=3).items()}
    args = serve.seam_inputs(2, 16, torch.device("cpu"), seed=4)
    with torch.no_grad():
        chain = serve.mhc_fused(p, args[2])
        first = chain(*args)
        again = chain(*args)
        want = serve.mhc_post_pre(p, args[2])(*args)
    assert [t.data_ptr() for t in first] == [t.data_ptr() for t in again]
    for g, w in zip(again, want):
        assert torch.equal(g, w)


def test_cpu_run_json_and_table(cpu_run):
    result, out = cpu_run
    assert json.loads((out / "serve.json").read_text()) == json.loads(json.dumps(result))
    lines = serve.table(result["rows"], tuple(result["columns"])).splitlines()
    assert lines[1].split() == ["M", "C"] + " ".join(result["columns"]).split()
    rows = [line.split() for line in lines[2:]]
    assert [r[:2] for r in rows] == [["1", "16"], ["5", "24"]]
    assert all("absent" in r and r.count("/") == 4 for r in rows)  # graph "-" / eager, for four columns


def test_report_renders_the_serve_section(cpu_run, tmp_path):
    result, out = cpu_run
    d = merged_results(tmp_path, lambda argv: report.main(["merge-serve"] + argv), out / "serve.json", "serve")
    page = "\n".join(report.report(d))
    assert "## The layer seam at decode batch sizes (inference)" in page and "mhc abc1234" in page
    assert "| M | C | mhc fused | mhc post_pre | mhc unfused | TE | torch eager |" in page
    assert "| 1 | 16 | - / " in page and "| absent | " in page
    # The targets need the GPU rows this run lacks: each says so rather than failing.
    assert "| seam in a CUDA graph <= 12 us at M = 128, C = 7168 | - | - |" in page
    assert "decode batch sizes" not in report_without(d, "serve")


def test_two_runs_merge_as_one_section(cpu_run, tmp_path):
    """Two runs of one machine back to back (e.g. one per C) become one serve section: every row, both
    commands, and a skipped configuration only where no run measured it."""
    result, _ = cpu_run
    first = {**result, "rows": [r for r in result["rows"] if r["M"] == 1],
             "skipped": [{"M": 5, "C": 24}, {"M": 9, "C": 24}], "command": "python3 bench/serve.py --config 1,16"}
    second = {**result, "rows": [r for r in result["rows"] if r["M"] == 5], "skipped": [],
              "command": "python3 bench/serve.py --config 5,24"}
    paths = []
    for i, run in enumerate((first, second)):
        paths.append(tmp_path / f"serve-{i}.json")
        paths[-1].write_text(json.dumps(run))
    results = tmp_path / "results.json"
    results.write_text((ROOT / "docs" / "perf" / "results.json").read_text())
    report.main(["merge-serve", str(results), *map(str, paths), "--setup", "mhc=abc1234"])
    serve_section = json.loads(results.read_text())["serve"]
    assert serve_section["rows"] == result["rows"] and serve_section["processes"] == 2
    assert serve_section["skipped"] == [{"M": 9, "C": 24}]
    page = "\n".join(report.report(json.loads(results.read_text())))
    assert "bench/serve.py in 2 processes back to back" in page
    assert "`python3 bench/serve.py --config 1,16`; `python3 bench/serve.py --config 5,24`" in page
    second["torch"] = "other"
    paths[1].write_text(json.dumps(second))
    with pytest.raises(SystemExit, match="differ in torch"):
        report.main(["merge-serve", str(results), *map(str, paths)])
