#!/usr/bin/env bash
# What bench/run-serve.sh and bench/run-stack.sh share (sourced by them, after they set
# name=serve|stack, budget (seconds), report_re (extra log lines to print) and report_lines):
# sets mhc up (test/gpu/setup-gpu.sh), then runs bench/$name.py with the time left of the budget
# counted from the start of the sourcing script; writes $OUT/$name.json and $OUT/$name.log and
# prints the log's summary lines and the table last. Arguments: [TE checkout] [bench/$name.py options].
set -u
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
te=${1:-}; shift $(( $# > 0 ? 1 : 0 ))
out=${OUT:-/tmp/mhc-out}; mkdir -p "$out"
start=$(date +%s)
source "$root/test/gpu/setup-gpu.sh" > "$out/$name.log" 2>&1 || { tail -20 "$out/$name.log"; exit 1; }
rm -f "$out/pip.log"  # the device tool brings back few files: the log and the JSON are the two
left=$(( budget - ($(date +%s) - start) )); (( left < 1 )) && left=1  # the first still runs
echo "setup took $(( $(date +%s) - start )) s; configurations start until ${left} s from now" | tee -a "$out/$name.log"
teopt=(); [ -n "$te" ] && teopt=(--te "$(cd "$te" && pwd)")  # absolute: $name.py runs in /tmp
(cd /tmp && python3 "$root/bench/$name.py" --out "$out" --budget-s "$left" "${teopt[@]}" "$@") >> "$out/$name.log" 2>&1
rc=$?
grep -E "^(device|config|skipped|done)|failed|Traceback|Error|DIFFERS$report_re" "$out/$name.log" | cut -c1-200 | tail -"$report_lines"
sed -n '/^== table/,$p' "$out/$name.log"
exit $rc
