#!/usr/bin/env bash
# Creates build/venv with PyTorch 2.11 (the GPU machine's version) and builds
# the mhc package into it (pip install --no-build-isolation .). Idempotent;
# prints the venv's python.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="$root/build/venv"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv" >&2
fi
py="$venv/bin/python"
if ! "$py" -c "import torch" 2>/dev/null; then
  echo "== installing torch 2.11 and test tools into $venv" >&2
  "$py" -m pip install -q --upgrade pip >&2
  "$py" -m pip install -q "torch==2.11.0" numpy pytest setuptools wheel ninja >&2
fi
echo "== building the mhc PyTorch extension" >&2
(cd "$root" && MAX_JOBS="$(nproc)" "$py" -m pip install -q --no-build-isolation . >&2)
echo "$py"
