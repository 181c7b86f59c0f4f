#!/usr/bin/env bash
# The 4-layer stack benchmark (bench/stack.py) in one device call on a GPU machine:
#
#   bash bench/run-stack.sh [TE checkout] [bench/stack.py options, e.g. --config identity,32768,7168]
#
# Sets mhc up (test/gpu/setup-gpu.sh: the carried compiler, the extension), then runs the
# configurations in bench/stack.py's order, starting none after STACK_BUDGET_S (default 200) seconds
# from the start of this script, so that the call ends within about 4 minutes even when the extension
# is built first (on a machine where it is already built, e.g. after test/gpu/run-torch-suite.sh, the
# setup takes seconds; a configuration's first column also pays the cold costs: mhc's JIT, TE's
# autotuning, torch.compile). Writes $OUT/stack.json and $OUT/stack.log (the setup's output first)
# and prints the table last, after each column's torch.cuda.memory_allocated() once it is gone and any
# LEFT ALIVE (a column's tensors still alive: a leak). Then, on the development machine:
#   python3 bench/report.py merge-stack docs/perf/results.json stack.json --setup mhc=... te=...
#   python3 bench/report.py > docs/PERFORMANCE.md
name=stack budget=${STACK_BUDGET_S:-200} report_re="|LEFT ALIVE|allocated after" report_lines=50
source "$(dirname "$0")/run-on-gpu.sh"
