#!/usr/bin/env bash
# On the GPU machine, after test/gpu/setup-gpu.sh: Nsight Compute sections for
# the mhc kernels whose names match REGEX, from bench/kernel_times.py's run
# of OPS at SHAPE: NCU_SKIP (default 2) matching launches are skipped (the
# warm-up calls), then NCU_COUNT (default 2) are profiled.
#   bash bench/probes/ncu.sh REGEX [OPS] [n,M,C] > report.txt
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
regex="$1"; ops="${2:-project}"; shape="${3:-4,32768,7168}"
cd /tmp && ncu --kernel-name "regex:$regex" --launch-skip ${NCU_SKIP:-2} --launch-count ${NCU_COUNT:-2} \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables \
  --section WarpStateStats --section Occupancy --section LaunchStats --section SchedulerStats \
  --section SourceCounters \
  python3 "$root/bench/kernel_times.py" --ops "$ops" --shape "$shape" --calls 1
