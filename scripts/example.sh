#!/usr/bin/env bash
# The main job on the shipped example: lower examples/transformer_n4.mlir (two
# transformer blocks, four mHC layers) as far as the pipeline goes, print the
# IR after each stage and the kernels it needs.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$root/build"
"$root/scripts/setup.sh" "$build" >/dev/null
opt="$build/bin/mhc-opt"
model="${1:-$root/examples/transformer_n4.mlir}"
arch="${MHC_ARCH:-sm_90a}"

echo "== $model: the model graph (mhc.layer per residual path)"
"$opt" "$model" | grep -c "mhc.layer" | sed 's/^/   mhc.layer ops: /'
echo
echo "== after --mhc-expand-layers --canonicalize --cse (first layer)"
"$opt" "$model" --mhc-expand-layers --canonicalize --cse |
  awk '/mhc.project/{p=1} p{print} /mhc.expand_combine/{if(p) exit}'
echo
echo "== after --mhc-specialize=arch=$arch: kernel report"
"$opt" "$model" --mhc-expand-layers --canonicalize --cse \
  --mhc-specialize=arch="$arch" --mhc-report-kernels -o /dev/null
