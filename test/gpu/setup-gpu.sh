#!/usr/bin/env bash
# Sourced on the GPU machine: unpacks the carried compiler (.bundle/toolchain,
# from scripts/build-gpu-toolchain.sh), points the JIT at it, and builds the
# PyTorch extension against the machine's torch.
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
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
export MHC_COMPILER="$tc/mhc-compile.sh" MHC_CACHE_DIR="${MHC_CACHE_DIR:-/tmp/mhc-cache}" PYTHONUNBUFFERED=1
"$MHC_COMPILER" --version-info || return 1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
start=$(date +%s)
(cd "$root" && MAX_JOBS=16 python3 -m pip install -q --no-build-isolation --no-deps . > "$out/pip.log" 2>&1) \
  || { tail -30 "$out/pip.log"; return 1; }
echo "extension built in $(( $(date +%s) - start )) s"
