#!/usr/bin/env bash
# The main job on the shipped example: lower examples/transformer_n4.mlir (two
# transformer blocks, four mHC layers: a pre step, three layer seams, a post
# step) through the whole pipeline to a kernel bundle (PTX, cubin, manifest
# per kernel), printing each stage and the kernels. Ops on the reference path
# (mhc.fallback, e.g. the seams until their kernels exist) get no kernel.
#   scripts/example.sh [model.mlir] [bundle-dir]     (MHC_ARCH=sm_90a by default)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$root/build"
"$root/scripts/setup.sh" "$build"   # one line per stage: installing, configuring, building N/M
opt="$build/bin/mhc-opt"
model="${1:-$root/examples/transformer_n4.mlir}"
bundle="${2:-$build/example-bundle}"
arch="${MHC_ARCH:-sm_90a}"
fuse=(--mhc-expand-layers --canonicalize --cse --mhc-fuse-pre --mhc-fuse-layers)
front=("${fuse[@]}" --mhc-specialize=arch="$arch")

echo
echo "== $model: $("$opt" "$model" | grep -c "mhc.layer") mhc.layer ops"
echo
echo "== after ${fuse[*]} (the first layer's pre step, its block and the first seam)"
"$opt" "$model" "${fuse[@]}" |
  awk '/mhc.pre /{p=1} p{print} /mhc.post_pre /{if(p) exit}'
echo
echo "== after --mhc-specialize=arch=$arch --mhc-generate-kernels: kernels as gpu.func"
"$opt" "$model" "${front[@]}" --mhc-generate-kernels | grep -E "^\s+gpu.func" | sed 's/(.*//'
echo
echo "== after --mhc-lower-to-nvvm: NVVM entry points"
"$opt" "$model" "${front[@]}" --mhc-generate-kernels --mhc-lower-to-nvvm |
  grep -E "llvm.func @mhc_.*nvvm.kernel" | sed 's/(.*//'
echo
echo "== --mhc-write-bundle=dir=$bundle: compiling kernels to PTX, cubin (ptxas) and manifests"
rm -rf "$bundle"
"$opt" "$model" "${front[@]}" --mhc-generate-kernels --mhc-write-bundle=dir="$bundle" \
  --mhc-report-kernels -o /dev/null
echo
python3 - "$bundle" <<'PY'
import glob, json, os, sys
# smem: ptxas' static bytes plus the dynamic bytes the launch reserves.
print(f"{'entry':58s} {'regs':>4s} {'spill':>5s} {'smem':>6s} grid")
for path in sorted(glob.glob(os.path.join(sys.argv[1], "mhc_*.json"))):
    m = json.load(open(path))
    for l in m["launches"]:
        r, g = l["resources"], l["grid"]
        if g["items_per_token"]:
            grid = f"ceil(M*{g['items_per_token']}/{g['items_per_block']})"
        else:
            grid = f"ceil(M/{g['tokens_per_block']})" if g["tokens_per_block"] else str(g["fixed_blocks"])
        if g["times_split"]:
            grid += " x S"
        if g.get("min_tokens", 0):
            grid += f" if M >= {g['min_tokens']}"
        if g.get("max_tokens", 0):
            grid += f" if M <= {g['max_tokens']}"
        print(f"{l['entry']:58s} {r['registers']:4d} {r['spill_stores']:5d} {r['shared_bytes'] + l['dynamic_shared_bytes']:6d} {grid}")
print(f"bundle: {sys.argv[1]} ({len(glob.glob(os.path.join(sys.argv[1], '*.cubin')))} cubins, {m['ptxas']})")
PY
