#!/usr/bin/env bash
# On the GPU machine, after test/gpu/setup-gpu.sh: Nsight Compute's view of
# the projection backward's main launch at each C given (issue 35, any C:
# K % 8 = 4 next to the aligned C), n = 4 (or $N), M = 32768, bf16 x, tf32, cn:
# DRAM and L2 bytes, shared-memory wavefronts and bank conflicts, issue
# and stall reasons. The full report goes to $OUT/ncu-any-c-<dir>-n<n>-C<C>.txt, a
# summary of chosen metrics to stdout.
#   bash bench/probes/any_c_ncu.sh 5120 5129
#   N=6 bash bench/probes/any_c_ncu.sh 5120 5126
# DIR=fwd profiles the forward's partial launch instead (torch.ops.mhc.project).
# With SOURCE=1 a second profile per C samples the warps' states per SASS
# line and writes ncu's source page to $OUT/ncu-any-c-<dir>-n<n>-C<C>-source.csv.gz,
# which bench/probes/ncu_source.py sums by role and instruction.
set -uo pipefail
out="${OUT:-/tmp}"; n="${N:-4}"; dir="${DIR:-bwd}"
if [ "$dir" = fwd ]; then
  kernel="regex:project_fwd.*_partial$"; op="torch.ops.mhc.project(x, phi, None, n, 'cn', True)"
else
  kernel="regex:project_bwd.*_main"; op="torch.ops.mhc.project_backward(gh, gms, x, phi, None, n, 'cn', True)"
fi
metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,\
lts__t_sectors_op_read.sum,lts__t_sectors_op_write.sum,\
lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_write.sum,\
lts__t_requests_srcunit_tex_op_write.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,\
l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,smsp__inst_executed.sum,\
sm__throughput.avg.pct_of_peak_sustained_elapsed,l1tex__throughput.avg.pct_of_peak_sustained_elapsed,\
lts__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,\
smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,\
smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,\
smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,\
smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,\
smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio,\
smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio,\
smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,\
smsp__average_warps_issue_stalled_membar_per_issue_active.ratio,\
smsp__average_warps_issue_stalled_no_instruction_per_issue_active.ratio,\
smsp__average_warps_issue_stalled_sleeping_per_issue_active.ratio,\
smsp__average_warps_issue_stalled_dispatch_stall_per_issue_active.ratio,\
smsp__average_warps_issue_stalled_branch_resolving_per_issue_active.ratio,\
smsp__issue_active.avg.pct_of_peak_sustained_elapsed
for C in "$@"; do
  call="
import torch, mhc
n, M, C = $n, 32768, $C
K, N = n * C, 2 * n + n * n
x = torch.randn(M, C, n, device='cuda').to(torch.bfloat16)
phi = torch.randn(N, K, device='cuda') / K ** 0.5
gh, gms = torch.randn(M, N, device='cuda'), torch.randn(M, device='cuda')
for _ in range(4):
    $op
torch.cuda.synchronize()
"
  cd /tmp && ncu --kernel-name "$kernel" --launch-skip 2 --launch-count 1 \
    --metrics "$metrics" python3 -c "$call" > "$out/ncu-any-c-$dir-n$n-C$C.txt" 2>&1
  if [ "${SOURCE:-0}" = 1 ]; then
    ncu --kernel-name "$kernel" --launch-skip 2 --launch-count 1 \
      --section SourceCounters -f -o "/tmp/ncu-any-c-$C" python3 -c "$call" > /dev/null 2>&1
    ncu -i "/tmp/ncu-any-c-$C.ncu-rep" --page source --csv --print-source sass \
      | gzip > "$out/ncu-any-c-$dir-n$n-C$C-source.csv.gz"
  fi
  echo "== n=$n C=$C (K % 8 = $(( n * C % 8 )))"
  grep -E "^\s+(gpu__|dram__|lts__|l1tex__|smsp__|sm__)" "$out/ncu-any-c-$dir-n$n-C$C.txt" | awk '{print "  " $1, $(NF-1), $NF}'
done
