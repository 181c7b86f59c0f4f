#!/usr/bin/env bash
# Compiles the kernel bundles the GPU checks load (test/gpu/specs.py lists)
# into .bundle/<list>/ with this checkout's mhc-compile, for the device run.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/setup.sh" "$root/build" >/dev/null
for list in "${@:-smoke large_m n1}"; do
  for which in $list; do
    dir="$root/.bundle/$which"
    rm -rf "$dir" && mkdir -p "$dir"
    python3 "$root/test/gpu/specs.py" "$which" |
      xargs -P "$(nproc)" -I{} "$root/build/bin/mhc-compile" --spec {} -o "$dir" >/dev/null
    echo "$which: $(ls "$dir"/*.json | wc -l) kernels in $dir"
  done
done
