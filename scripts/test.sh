#!/usr/bin/env bash
# Builds everything and runs every test (lit/FileCheck through ctest).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$root/build"
"$root/scripts/setup.sh" "$build"
cd "$build"
ctest --output-on-failure -j"$(nproc)"
