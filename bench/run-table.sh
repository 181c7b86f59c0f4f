#!/usr/bin/env bash
# docs/PERFORMANCE.md's tables on one GPU machine, in parts that each fit a
# 10-minute device call; run them back to back on the same (warm) machine:
#
#   bash bench/run-table.sh PART [TE checkout]
#
#   1: n = 4, M = 128 (mhc, TE, torch.compile), host dispatch, cold JIT
#   2: n = 4, M = 8192          3: n = 4, M = 32768
#   4: n = 8, M = 8192 and 32768 (mhc, torch.compile), device time per kernel
#
# Writes $OUT/bench-PART.json and its log; part 4 also the device times per
# kernel (k*.json and their log), packed in $OUT/kernels-4.tar because the
# device tool brings back only a few files per call. Then:
# tar -xf kernels-4.tar; python3 bench/report.py merge docs/perf/results.json bench-[1-4].json \
#   --kernels k*_*.json --setup driver=... torch=... mhc=... ptxas=... te=...
# python3 bench/report.py > docs/PERFORMANCE.md
set -u
part=${1:?part 1-4}; te=${2:-}
out=${OUT:-/tmp/mhc-out}; mkdir -p "$out"
source test/gpu/setup-gpu.sh > /tmp/mhc-setup.log 2>&1 || { tail -20 /tmp/mhc-setup.log; exit 1; }
rm -f "$out/pip.log"
teopt=(); [ -n "$te" ] && teopt=(--te "$te")
bench() { python3 bench/bench.py --out "/tmp/mhc-bench-$part" "$@" > "$out/bench-$part.log" 2>&1; rc=$?
          cp "/tmp/mhc-bench-$part/perf.json" "$out/bench-$part.json"; grep -v "^  " "$out/bench-$part.log" | tail -8
          return $rc; }
case $part in
  1) bench "${teopt[@]}" --shape 4,128,4096 --shape 4,128,7168 ;;
  2) bench "${teopt[@]}" --shape 4,8192,4096 --shape 4,8192,7168 --no-extras ;;
  3) bench "${teopt[@]}" --shape 4,32768,4096 --shape 4,32768,7168 --no-extras ;;
  4) bench --shape 8,8192,4096 --shape 8,32768,7168 --impls mhc,torch.compile --no-extras
     for sh in 4,128,4096 4,32768,7168 8,32768,7168; do
       python3 bench/kernel_times.py --shape $sh --json "$out/k_${sh//,/_}.json" >> "$out/kernels.log" 2>&1
     done
     [ -n "$te" ] && python3 bench/kernel_times.py --shape 4,32768,7168 --te "$te" \
       --json "$out/kte_4_32768_7168.json" >> "$out/kernels.log" 2>&1
     grep -E "sinkhorn|project" "$out/kernels.log" | cut -c1-110 | head -20
     (cd "$out" && tar -cf kernels-4.tar k*_*.json kernels.log && rm -f k*_*.json kernels.log) ;;
  *) echo "part 1-4"; exit 2 ;;
esac
