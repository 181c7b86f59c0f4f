#!/usr/bin/env bash
# On the GPU machine: unpack the carried compiler (.bundle/toolchain), build
# the PyTorch extension against the machine's torch, run the GPU suite
# (test_torch_ops.py, test_acc_gpu.py; the layer seam's test_seam_gpu.py; the
# decode-size one-launch forward's test_serve_gpu.py) and
# compute-sanitizer (memcheck, racecheck) on one size per op. Logs under $OUT
# (the sanitizer's in sanitizer-logs.tar).
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="${OUT:-/tmp/mhc-out}"; mkdir -p "$out"
source "$root/test/gpu/setup-gpu.sh" || exit 1
cd /tmp && python3 -m pytest -q -p no:cacheprovider "$root/test/gpu/test_torch_ops.py" "$root/test/gpu/test_acc_gpu.py" \
  "$root/test/gpu/test_seam_gpu.py" "$root/test/gpu/test_serve_gpu.py" "${@}" 2>&1 | tee "$out/torch-suite.log" | tail -25
status=${PIPESTATUS[0]}
head -1 "$out/torch-suite-summary.txt" 2>/dev/null  # device, seed and check count
head -1 "$out/seam-summary.txt" 2>/dev/null  # the seam's, and whether its kernels exist
python3 "$root/test/gpu/sanitize.py" > "$out/sanitizer-driver.log" 2>&1 || { cat "$out/sanitizer-driver.log"; exit 1; }
for tool in memcheck racecheck; do
  compute-sanitizer --tool $tool --error-exitcode 9 python3 "$root/test/gpu/sanitize.py" > "$out/sanitizer-$tool.log" 2>&1
  echo "compute-sanitizer $tool: exit $?: $(grep -E 'SUMMARY' "$out/sanitizer-$tool.log" | tail -1)"
done
# One file for the three sanitizer logs: the device tool brings back only a
# few files per call, and the summary and results must be among them.
(cd "$out" && tar -cf sanitizer-logs.tar sanitizer-*.log && rm -f sanitizer-*.log)
exit $status
