#!/usr/bin/env bash
# On the GPU machine, one device call per part (each under the device's 10 minutes):
#
#   bash test/gpu/run-all.sh suite    # the GPU suite + compute-sanitizer (run-torch-suite.sh [extra files])
#   bash test/gpu/run-all.sh tests    # seam_gpu.py, test_any_c_gpu.py, test_pre_backward_gpu.py,
#                                     # test_te_contract_gpu.py (with TE where .te is)
#   bash test/gpu/run-all.sh probes   # any_c.py, pre_bwd.py, seam_bwd_kernels.py, one_launch_probe.py
#                                     # and the stack's mhc.te columns (the fp32 buffer's effect)
#
# Logs go to $OUT/<part>.tgz (one file: the device tool returns few); the summary lines print last.
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
part=${1:?suite, tests or probes}
out="${OUT:-/tmp/mhc-out}"; logs="$out/$part"; mkdir -p "$logs"
te=(); [ -d "$root/.te/transformer_engine" ] && te=("$root/.te")
summary="$logs/summary.txt"; : > "$summary"
note() { echo "$*" | tee -a "$summary"; }

run_suite() {
  OUT="$logs" bash "$root/test/gpu/run-torch-suite.sh" "$@" > "$logs/suite.log" 2>&1
  local rc=$?
  note "suite (run-torch-suite.sh $*): rc $rc"
  grep -E "passed|failed|compute-sanitizer|^device|seed" "$logs/suite.log" | tail -6 | tee -a "$summary"
  return $rc
}

run_tests() {
  source "$root/test/gpu/setup-gpu.sh" > "$logs/setup.log" 2>&1 || { tail -20 "$logs/setup.log"; return 1; }
  python3 "$root/test/gpu/seam_gpu.py" --compiler "$MHC_COMPILER" > "$logs/seam_parts.log" 2>&1
  note "seam_gpu.py (the fused forward and backward bitwise against their parts): rc $? $(tail -1 "$logs/seam_parts.log")"
  (cd /tmp && python3 -m pytest -q -p no:cacheprovider "$root/test/gpu/test_any_c_gpu.py") > "$logs/any_c.log" 2>&1
  note "test_any_c_gpu.py: rc $? $(tail -1 "$logs/any_c.log")"
  (cd /tmp && python3 -m pytest -q -p no:cacheprovider "$root/test/gpu/test_pre_backward_gpu.py") > "$logs/pre_bwd.log" 2>&1
  note "test_pre_backward_gpu.py: rc $? $(tail -1 "$logs/pre_bwd.log")"
  [ ${#te[@]} -gt 0 ] && export MHC_TE_PATH="${te[0]}"
  (cd /tmp && python3 -m pytest -q -p no:cacheprovider "$root/test/gpu/test_te_contract_gpu.py") \
    > "$logs/te_contract.log" 2>&1
  note "test_te_contract_gpu.py (TE: ${te[0]:-absent}): rc $? $(tail -1 "$logs/te_contract.log")"
}

run_probes() {
  source "$root/test/gpu/setup-gpu.sh" > "$logs/setup.log" 2>&1 || { tail -20 "$logs/setup.log"; return 1; }
  { python3 "$root/bench/probes/any_c.py"; python3 "$root/bench/probes/any_c.py" --tf32 0
    python3 "$root/bench/probes/any_c.py" --n 6 --pairs 5126:5120; } > "$logs/any_c.txt" 2>&1
  note "== any C (bench/probes/any_c.py, rc $?)"; grep -E "device|ratio" "$logs/any_c.txt" | tee -a "$summary"
  python3 "$root/bench/probes/pre_bwd.py" > "$logs/pre_bwd.txt" 2>&1
  note "== the pre step's backward (bench/probes/pre_bwd.py, rc $?)"; tail -12 "$logs/pre_bwd.txt" | tee -a "$summary"
  python3 "$root/bench/probes/seam_bwd_kernels.py" --shape 32768,7168 > "$logs/seam_kernels.txt" 2>&1
  note "== seam kernels (seam_bwd_kernels.py --shape 32768,7168, rc $?)"; tail -25 "$logs/seam_kernels.txt" | tee -a "$summary"
  python3 "$root/bench/probes/one_launch_probe.py" --ms 1,4,16,32,128 > "$logs/one_launch.txt" 2>&1
  note "== one launch (one_launch_probe.py --ms 1,4,16,32,128, rc $?)"; sed -n '/^us per seam/,$p' "$logs/one_launch.txt" | tee -a "$summary"
  (cd /tmp && python3 "$root/bench/stack.py" --out "$logs" --config identity,32768,7168 --config identity,32768,4096 \
     --columns "mhc fused,mhc.te,mhc.te acc buffer") > "$logs/stack.log" 2>&1
  note "== stack, mhc.te with and without the fp32 buffer (bench/stack.py, rc $?)"; sed -n '/^== table/,$p' "$logs/stack.log" | tee -a "$summary"
}

case $part in
  suite) shift; run_suite "$@" ;;
  tests) run_tests ;;
  probes) run_probes ;;
  *) echo "unknown part $part (suite, tests or probes)"; exit 2 ;;
esac
rc=$? # the suite's status (a failed test fails the call); tests and probes report theirs in the summary
(cd "$out" && tar -czf "$part.tgz" "$part" && rm -rf "$part")
exit $rc
