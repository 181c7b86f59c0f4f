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
set -u
root="$(cd "$(dirname "$0")/.." && pwd)"
te=${1:-}; shift $(( $# > 0 ? 1 : 0 ))
out=${OUT:-/tmp/mhc-out}; mkdir -p "$out"
start=$(date +%s)
source "$root/test/gpu/setup-gpu.sh" > "$out/serve.log" 2>&1 || { tail -20 "$out/serve.log"; exit 1; }
rm -f "$out/pip.log"  # the device tool brings back few files: the log and the JSON are the two
left=$(( ${SERVE_BUDGET_S:-200} - ($(date +%s) - start) )); (( left < 1 )) && left=1  # the first still runs
echo "setup took $(( $(date +%s) - start )) s; configurations start until ${left} s from now" | tee -a "$out/serve.log"
teopt=(); [ -n "$te" ] && teopt=(--te "$(cd "$te" && pwd)")  # absolute: serve.py runs in /tmp
(cd /tmp && python3 "$root/bench/serve.py" --out "$out" --budget-s "$left" "${teopt[@]}" "$@") >> "$out/serve.log" 2>&1
rc=$?
grep -E "^(device|config|skipped|done)|failed|Traceback|Error|DIFFERS" "$out/serve.log" | cut -c1-200 | tail -20
sed -n '/^== table/,$p' "$out/serve.log"
exit $rc
