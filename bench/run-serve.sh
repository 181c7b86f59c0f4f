#!/usr/bin/env bash
# The seam-at-decode-sizes benchmark (bench/serve.py) in one device call on a GPU machine:
#
#   bash bench/run-serve.sh [TE checkout] [bench/serve.py options, e.g. --config 128,7168]
#
# Sets mhc up (test/gpu/setup-gpu.sh: the carried compiler, the extension), then runs the
# configurations in bench/serve.py's order, starting none after SERVE_BUDGET_S (default 200) seconds
# from the start of this script, so that the call ends within about 4 minutes even when the extension
# is built first (a configuration's first column also pays the cold costs: mhc's JIT, TE's
# autotuning, torch.compile). Writes $OUT/serve.json and $OUT/serve.log (the setup's output first)
# and prints the table last. Then, on the development machine:
#   python3 bench/report.py merge-serve docs/perf/results.json serve.json --setup mhc=... te=...
#   python3 bench/report.py > docs/PERFORMANCE.md
name=serve budget=${SERVE_BUDGET_S:-200} report_re="" report_lines=20
source "$(dirname "$0")/run-on-gpu.sh"
