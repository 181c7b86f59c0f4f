#!/usr/bin/env bash
# Any C (issue 35): the odd C's speed over the aligned C's for every n and
# class of K % 8, forward and backward, in one call (bench/probes/any_c.py
# per n; M = 32768, bf16 x, f32 phi, cn), on the GPU machine after
# test/gpu/setup-gpu.sh. Full output to $OUT/any-c-sweep.log,
# a table of ratios (target >= 0.90) to stdout, last.
#   bash bench/probes/any_c_sweep.sh            # tf32, then precise for n = 1, 3, 4
set -uo pipefail
out="${OUT:-/tmp}"; log="$out/any-c-sweep.log"; : > "$log"
here="$(cd "$(dirname "$0")" && pwd)"
run() { python3 "$here/any_c.py" "$@" 2>&1 | tee -a "$log" | grep -E "ratio|rror"; }
declare -A pairs=(
  [1]="5121:5120,5122:5120,5124:5120" [2]="5121:5120,5123:5120,5122:5120"
  [3]="5121:5120,5122:5120,5124:5120" [4]="5121:5120,7167:7168"
  [5]="5121:5120,5122:5120,5124:5120" [6]="5121:5120,5122:5120"
  [7]="5121:5120,5122:5120,5124:5120" [8]="5121:5120,5124:5120")
rows=()
for n in 1 2 3 4 5 6 7 8; do
  while read -r line; do rows+=("n=$n tf32 $line"); done < <(run --n "$n" --pairs "${pairs[$n]}")
done
for n in 1 3 4; do
  while read -r line; do rows+=("n=$n precise $line"); done < <(run --n "$n" --tf32 0 --pairs "${pairs[$n]}")
done
echo "== any C: odd C over aligned C, bytes per second ($(python3 -c 'import torch; print(torch.cuda.get_device_name())'))"
printf '%s\n' "${rows[@]}" | sed -E 's/^(n=[0-9]+ [a-z0-9]+) project\.([a-z]+) C=([0-9]+) \(K%8=([0-9])\):.*ratio ([0-9.]+)/\1 \2 C=\3 K%8=\4 \5/'
