#!/usr/bin/env bash
# Builds everything and runs every test that needs no GPU: lit/FileCheck and
# unit tests through ctest, the fuzzers for a minute each (scripts/fuzz.sh),
# then the PyTorch package's CPU tests with pytest.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$root/build"
"$root/scripts/setup.sh" "$build"
echo "== ctest: lit/FileCheck and unit tests (spec-matrix, a spread of kernels to cubin, is the slow one)"
(cd "$build" && ctest --output-on-failure -j"$(nproc)")
"$root/scripts/fuzz.sh" 60
py="$("$root/scripts/python-env.sh")"
echo "== pytest: the PyTorch package on CPU (test/python; the torch.compile tests are the slow ones)"
cd "$build" && "$py" -m pytest -q "$root/test/python"
