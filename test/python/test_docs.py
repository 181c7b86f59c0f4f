"""docs/PERFORMANCE.md is generated: it must be what bench/report.py prints for
the committed results file, so the page and its numbers cannot drift apart."""

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_performance_page_is_generated_from_results():
    got = subprocess.run([sys.executable, str(ROOT / "bench" / "report.py"), str(ROOT / "docs" / "perf" / "results.json")],
                         check=True, capture_output=True, text=True).stdout
    want = (ROOT / "docs" / "PERFORMANCE.md").read_text()
    assert got == want, "docs/PERFORMANCE.md is stale: run python3 bench/report.py > docs/PERFORMANCE.md"
