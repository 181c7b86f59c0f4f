#!/usr/bin/env bash
# Sourced on the GPU machine: unpacks the carried compiler (.bundle/toolchain,
# from scripts/build-gpu-toolchain.sh), points the JIT at it, and builds the
# PyTorch extension against the machine's torch.
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out="${OUT:-/tmp/mhc-out}"; mkdir -p "$out"
tc=/tmp/mhc-toolchain; mkdir -p "$tc"
# Each file is unpacked again when its .xz changed (a warm machine keeps /tmp).
for f in mhc-compile libLLVM.so.22.1 libz3.so.4; do
  sum=$(sha1sum "$root/.bundle/toolchain/$f.xz" | cut -c1-40)
  [ -e "$tc/$f" ] && [ "$(cat "$tc/$f.sha1" 2>/dev/null)" = "$sum" ] && continue
  echo "$sum" > "$tc/$f.sha1"
  python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],'wb'))" \
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
# The extension is rebuilt only when its sources changed since the last build.
stamp=/tmp/mhc-ext.sha1
sum=$(cd "$root" && cat setup.py pyproject.toml $(find runtime include lib python -type f -not -name '*.pyc' | sort) | sha1sum | cut -c1-40)
if [ "$(cat "$stamp" 2>/dev/null)" = "$sum" ] && python3 -c "import mhc" 2>/dev/null; then
  echo "extension unchanged since the last build"; return 0
fi
start=$(date +%s)
(cd "$root" && MAX_JOBS=16 python3 -m pip install -q --no-build-isolation --no-deps . > "$out/pip.log" 2>&1) \
  || { tail -30 "$out/pip.log"; return 1; }
echo "extension built in $(( $(date +%s) - start )) s"
echo "$sum" > "$stamp"
