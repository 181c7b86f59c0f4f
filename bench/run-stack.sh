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
set -u
root="$(cd "$(dirname "$0")/.." && pwd)"
te=${1:-}; shift $(( $# > 0 ? 1 : 0 ))
out=${OUT:-/tmp/mhc-out}; mkdir -p "$out"
start=$(date +%s)
source "$root/test/gpu/setup-gpu.sh" > "$out/stack.log" 2>&1 || { tail -20 "$out/stack.log"; exit 1; }
rm -f "$out/pip.log"  # the device tool brings back few files: the log and the JSON are the two
left=$(( ${STACK_BUDGET_S:-200} - ($(date +%s) - start) )); (( left < 1 )) && left=1  # the first still runs
echo "setup took $(( $(date +%s) - start )) s; configurations start until ${left} s from now" | tee -a "$out/stack.log"
teopt=(); [ -n "$te" ] && teopt=(--te "$(cd "$te" && pwd)")  # absolute: stack.py runs in /tmp
(cd /tmp && python3 "$root/bench/stack.py" --out "$out" --budget-s "$left" "${teopt[@]}" "$@") >> "$out/stack.log" 2>&1
rc=$?
grep -E "^(device|config|skipped|done)|failed|Traceback|Error|DIFFERS|LEFT ALIVE|allocated after" "$out/stack.log" | cut -c1-200 | tail -50
sed -n '/^== table/,$p' "$out/stack.log"
exit $rc
