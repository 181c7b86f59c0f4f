#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/README.md) in build-fuzz/ with clang-22,
# ASan and UBSan, and runs each for a bounded time over the seeds from the
# tests and fuzz/corpus/. Prints one line per target; exits non-zero when a
# target crashes, naming the reproducer.
# Usage: scripts/fuzz.sh [seconds per target]   (default 60)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$root/build-fuzz"
seconds="${1:-60}"

if [ ! -f /usr/lib/llvm-22/lib/cmake/mlir/MLIRConfig.cmake ]; then
  echo "fuzz.sh: LLVM/MLIR 22 is missing; run scripts/setup.sh first" >&2
  exit 2
fi
fuzzer_rt() { compgen -G "$(clang-22 -print-resource-dir)/lib/*/libclang_rt.fuzzer*.a" >/dev/null; }
if ! command -v clang++-22 >/dev/null || ! fuzzer_rt; then
  echo "== installing: clang-22 libclang-rt-22-dev"
  sudo_=""
  [ "$(id -u)" = 0 ] || sudo_="sudo"
  $sudo_ apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y -qq clang-22 libclang-rt-22-dev >/dev/null
fi

if [ ! -f "$build/build.ninja" ]; then
  echo "== configuring $build"
  launcher=()  # ccache, where installed, only caches
  command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
  CC=clang-22 CXX=clang++-22 cmake -G Ninja -S "$root" -B "$build" "${launcher[@]}" \
    -DCMAKE_BUILD_TYPE=Release -DMHC_ENABLE_FUZZERS=ON \
    -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-22/bin/lit >/dev/null
fi
echo "== building the fuzzers"
cmake --build "$build" --target mhc-fuzzers -- -j"$(nproc)"

seeds="$build/corpus/seeds"
rm -rf "$seeds"
python3 "$root/fuzz/make-corpus.py" "$seeds"
regressions="$root/fuzz/corpus/regressions"
mkdir -p "$build/artifacts" "$build/logs"

# run_target NAME SEED-DIRS... [-- extra libFuzzer flags]
failed=0
run_target() {
  local name="$1"; shift
  local dirs=() flags=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do
    [ -d "$1" ] && dirs+=("$1")
    shift
  done
  [ $# -gt 0 ] && shift && flags=("$@")
  local work="$build/corpus/$name" log="$build/logs/$name.log"
  mkdir -p "$work"
  local rc=0
  # stdout is closed (-close_fd_mask=1): --mhc-report-kernels prints there.
  "$build/bin/mhc-fuzz-$name" -max_total_time="$seconds" -timeout=20 \
    -rss_limit_mb=2048 -close_fd_mask=1 -print_final_stats=1 \
    -artifact_prefix="$build/artifacts/$name-" "${flags[@]}" \
    "$work" "${dirs[@]}" >"$log" 2>&1 || rc=$?
  local execs
  execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")"
  if [ $rc -eq 0 ]; then
    printf 'fuzz %-8s %10s inputs in %s s, %s/s, 0 crashes\n' "$name" "$execs" \
      "$seconds" "$((${execs:-0} / seconds))"
  else
    local artifact
    artifact="$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -n1)"
    echo "fuzz $name: CRASH (exit $rc) after ${execs:-?} inputs; reproducer: ${artifact:-none}"
    echo "  rerun: $build/bin/mhc-fuzz-$name ${artifact:-<input>}   (log: $log)"
    grep -m1 -E 'ERROR: (AddressSanitizer|libFuzzer|UndefinedBehaviorSanitizer)|runtime error|mhc-fuzz-' \
      "$log" | sed 's/^/  /' || true
    failed=1
  fi
}

run_target mlir "$seeds/mlir" "$regressions/mlir" -- -dict="$seeds/mlir.dict"
run_target spec "$seeds/spec" "$regressions/spec"
run_target manifest "$root/fuzz/corpus/manifest" "$regressions/manifest"
exit $failed
