#!/usr/bin/env bash
# On the GPU machine: set up mhc (test/gpu/setup-gpu.sh) and run bench/bench.py;
# pass --te PATH for the Transformer Engine column (an outside checkout).
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
source "$root/test/gpu/setup-gpu.sh" || exit 1
cd /tmp && python3 "$root/bench/bench.py" --out "${OUT:-/tmp/mhc-out}" "$@" 2>&1 | tee "${OUT:-/tmp/mhc-out}/bench.log"
