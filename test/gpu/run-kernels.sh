#!/usr/bin/env bash
# On the GPU machine: check every kernel bundle under $1 against float64
# MATH.md (test/gpu/kernels.py). Logs and JSON results go to $OUT when set.
set -uo pipefail
bundle="${1:-.bundle/smoke}"
tokens="${2:-1,7,4096}"
out="${OUT:-/tmp}"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 test/gpu/kernels.py "$bundle" --tokens "$tokens" --out "$out/kernels.json" 2>&1 | tee "$out/kernels.log"
