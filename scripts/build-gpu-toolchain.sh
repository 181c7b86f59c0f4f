#!/usr/bin/env bash
# Packs the compiler for the GPU machine (which has no MLIR): a stripped
# mhc-compile, Debian's libLLVM.so.22.1 and libz3 (all xz-compressed), into
# .bundle/toolchain/. test/gpu/run-torch-suite.sh unpacks them there.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="$root/.bundle/toolchain"
"$root/scripts/setup.sh" "$root/build" >/dev/null
rm -rf "$out" && mkdir -p "$out"
strip -o "$out/mhc-compile" "$root/build/bin/mhc-compile"
xz -T0 -6 "$out/mhc-compile"
xz -T0 -6 -c /usr/lib/llvm-22/lib/libLLVM.so.22.1 > "$out/libLLVM.so.22.1.xz"
xz -T0 -6 -c /lib/x86_64-linux-gnu/libz3.so.4 > "$out/libz3.so.4.xz"
du -sh "$out"/*
