#!/usr/bin/env bash
# Installs what the build needs (Debian 12: LLVM/MLIR 22 from Debian's
# packages, CMake, Ninja) when it is missing, then configures and builds.
# Usage: scripts/setup.sh [build-dir]   (default: build)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"

need=()
[ -f /usr/lib/llvm-22/lib/cmake/mlir/MLIRConfig.cmake ] || need+=(llvm-22-dev libmlir-22-dev)
[ -x /usr/lib/llvm-22/bin/FileCheck ] || need+=(llvm-22-tools)
[ -x /usr/lib/llvm-22/bin/mlir-tblgen ] || need+=(mlir-22-tools)
command -v cmake >/dev/null || need+=(cmake)
command -v ninja >/dev/null || need+=(ninja-build)
command -v g++ >/dev/null || need+=(g++)
python3 -c "import venv, ensurepip" 2>/dev/null || need+=(python3-venv)
if [ ${#need[@]} -gt 0 ]; then
  echo "== installing: ${need[*]}"
  sudo_=""
  [ "$(id -u)" = 0 ] || sudo_="sudo"
  $sudo_ apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y -qq "${need[@]}" >/dev/null
fi

if [ ! -f "$build/build.ninja" ]; then
  echo "== configuring $build"
  cmake -G Ninja -S "$root" -B "$build" \
    -DCMAKE_BUILD_TYPE=Release \
    -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-22/bin/lit >/dev/null
fi
echo "== building"
cmake --build "$build" -- -j"$(nproc)"
