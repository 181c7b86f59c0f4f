#!/usr/bin/env bash
# On the GPU machine: unpack the carried compiler (.bundle/toolchain), build
# the PyTorch extension against the machine's torch, run the GPU suite
# (test_torch_ops.py) and compute-sanitizer (memcheck, racecheck) on one size
# per op. Logs under $OUT.
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="${OUT:-/tmp/mhc-out}"; mkdir -p "$out"
tc=/tmp/mhc-toolchain; mkdir -p "$tc"
for f in mhc-compile libLLVM.so.22.1 libz3.so.4; do
  [ -e "$tc/$f" ] || python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],'wb'))" \
    "$root/.bundle/toolchain/$f.xz" "$tc/$f"
done
chmod +x "$tc/mhc-compile"
cat > "$tc/mhc-compile.sh" <<SH
#!/bin/sh
LD_LIBRARY_PATH=$tc\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH} exec $tc/mhc-compile "\$@"
SH
chmod +x "$tc/mhc-compile.sh"
export MHC_COMPILER="$tc/mhc-compile.sh" MHC_CACHE_DIR=/tmp/mhc-cache PYTHONUNBUFFERED=1
"$MHC_COMPILER" --version-info || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
start=$(date +%s)
(cd "$root" && MAX_JOBS=16 python3 -m pip install -q --no-build-isolation --no-deps . > "$out/pip.log" 2>&1) \
  || { tail -30 "$out/pip.log"; exit 1; }
echo "extension built in $(( $(date +%s) - start )) s"
cd /tmp && python3 -m pytest -q -p no:cacheprovider "$root/test/gpu/test_torch_ops.py" "${@}" 2>&1 | tee "$out/torch-suite.log" | tail -25
status=${PIPESTATUS[0]}
python3 "$root/test/gpu/sanitize.py" > "$out/sanitizer-driver.log" 2>&1 || { cat "$out/sanitizer-driver.log"; exit 1; }
for tool in memcheck racecheck; do
  compute-sanitizer --tool $tool --error-exitcode 9 python3 "$root/test/gpu/sanitize.py" > "$out/sanitizer-$tool.log" 2>&1
  echo "compute-sanitizer $tool: exit $?: $(grep -E 'SUMMARY' "$out/sanitizer-$tool.log" | tail -1)"
done
exit $status
