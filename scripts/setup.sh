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
  # ccache, where installed, only caches: a fresh machine builds the same.
  launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
  cmake -G Ninja -S "$root" -B "$build" "${launcher[@]}" \
    -DCMAKE_BUILD_TYPE=Release \
    -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-22/bin/lit >/dev/null
fi
# One line per tenth of the build (and any compiler message), not per file.
echo "== building $build with $(nproc) jobs"
NINJA_STATUS="[%f/%t] " cmake --build "$build" -- -j"$(nproc)" | awk '
  match($0, /^\[[0-9]+\/[0-9]+\] /) {
    split(substr($0, 2, RLENGTH - 3), n, "/")
    if (int(10 * n[1] / n[2]) > shown || n[1] == n[2]) {
      shown = int(10 * n[1] / n[2]); printf "== building %d/%d\n", n[1], n[2]; fflush()
    }
    next
  }
  /^ninja: no work to do/ { print "== build up to date"; next }
  { print; fflush() }'
