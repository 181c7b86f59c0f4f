#!/usr/bin/env python3
"""Seed corpora and the MLIR dictionary for the fuzz targets, from the tests.

  fuzz/make-corpus.py OUT

writes OUT/mlir/ (every test/**/*.mlir and examples/*.mlir split on
`// -----`, as -split-input-file does), OUT/spec/ (the GPU suite's specs from
test/gpu/specs.py and the spec strings of test/unit/KernelSpecTest.cpp) and
OUT/mlir.dict (mhc's op names, attribute names and keywords from the ODS, plus
the MLIR syntax mhc graphs use). Manifest seeds are committed under
fuzz/corpus/manifest/ (they need a codegen build to make).
"""

import hashlib
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent

# MLIR syntax of mhc graphs (the ODS gives the mhc-specific words).
MLIR_TOKENS = [
    "func.func", "func.call", "func.return", "return", "arith.constant", "tensor.empty",
    "tensor.cast", "module", "tensor<", "?x", "x", "bf16", "f16", "f32", "f64", "i64",
    "index", "->", "dense<", ": i64", "unit", "true", "false", "#mhc.spec<",
    "mhc.spec", "mhc.fallback", "^bb0(", "%arg0", "loc(", "{", "}", "(", ")", "<", ">",
    "0x7FC00000", "1.0e-6", "-1", "0", "9223372036854775807", "4611686018427387904",
]


def write_seed(directory, text):
    """Writes `text` under its content hash, as libFuzzer names corpus files."""
    data = text.encode()
    (directory / hashlib.sha1(data).hexdigest()).write_bytes(data)


def mlir_seeds(out):
    files = sorted(ROOT.glob("test/**/*.mlir")) + sorted(ROOT.glob("examples/*.mlir"))
    for path in files:
        for chunk in re.split(r"^// -----.*$", path.read_text(), flags=re.M):
            if chunk.strip():
                write_seed(out, chunk)


def spec_seeds(out):
    specs = set()
    for which, arch in [("smoke", "sm_90a"), ("n1", "sm_80"), ("large_m", "sm_100a")]:
        listed = subprocess.run(
            [sys.executable, str(ROOT / "test/gpu/specs.py"), which, "--arch", arch],
            check=True, capture_output=True, text=True).stdout
        specs.update(listed.split())
    unit = (ROOT / "test/unit/KernelSpecTest.cpp").read_text()
    specs.update(re.findall(r'"(\w+\.(?:fwd|bwd)[^"]*)"', unit))
    for spec in sorted(specs):
        write_seed(out, spec)


def mlir_dictionary(path):
    ods = (ROOT / "include/mhc/Dialect/MhcOps.td").read_text()
    attrs = (ROOT / "include/mhc/Dialect/MhcAttrs.td").read_text()
    words = set(MLIR_TOKENS)
    words.update("mhc." + op for op in re.findall(r'Mhc_\w*Op<"(\w+)"', ods))
    words.update(re.findall(r'Attr\S*>:\$(\w+)', ods))      # attribute names
    words.update(re.findall(r'`(\w+)`', ods))               # format keywords
    words.update(re.findall(r'I32EnumAttrCase<"(\w+)"', attrs))
    lines = ['"%s"' % w.replace("\\", "\\\\").replace('"', '\\"') for w in sorted(words)]
    path.write_text("\n".join(lines) + "\n")


def main():
    out = pathlib.Path(sys.argv[1])
    for name in ("mlir", "spec"):
        (out / name).mkdir(parents=True, exist_ok=True)
    mlir_seeds(out / "mlir")
    spec_seeds(out / "spec")
    mlir_dictionary(out / "mlir.dict")


if __name__ == "__main__":
    main()
