#!/usr/bin/env bash
# On a GPU machine with >= 2 GPUs: builds the extension as the torch suite
# does (setup-gpu.sh) and runs test_ddp_gpu.py (DDP and FSDP2 over NCCL on
# two GPUs against one GPU). Log in $OUT/ddp-suite.log.
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="${OUT:-/tmp/mhc-out}"; mkdir -p "$out"
source "$root/test/gpu/setup-gpu.sh" || exit 1
cd /tmp && python3 -m pytest -q -rs -p no:cacheprovider "$root/test/gpu/test_ddp_gpu.py" "${@}" 2>&1 \
  | tee "$out/ddp-suite.log" | tail -25
exit "${PIPESTATUS[0]}"
