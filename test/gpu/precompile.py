"""Every kernel a GPU suite will request, built before its first test.

A suite whose cases each JIT-compile their own specs one by one spends its
time in the compiler (test_te_contract_gpu.py: 2 tests in 200 s). Instead:
record the specs a dry pass on the CPU (the reference path) would request on
CUDA (mhc._C.requested_specs for each mhc op call, the CUDA entries' own spec
builders, through mhc.export's recorder), then build them with mhc-compile
processes in parallel, one bundle directory per worker, and load those
bundles (mhc.load_bundle) ahead of the cache and the JIT compiler. A spec the
dry pass missed still compiles on demand, so this only saves time."""

import os
import queue
import shutil
import subprocess
import threading
import time

import torch

import mhc
from mhc import export


def device_arch():
    """The arch the runtime resolves kernels for on this device (sm_90 parts: sm_90a)."""
    major, minor = torch.cuda.get_device_capability()
    return f"sm_{major}{minor}" + ("a" if major >= 9 else "")


def recorded_specs(calls, arch):
    """The distinct specs (canonical, for `arch`) that each of `calls` (no
    argument callables, run on CPU tensors with autograd on) requests, in
    order of first request."""
    recorder = export._SpecRecorder(arch)
    with torch.enable_grad(), recorder:
        for call in calls:
            call()
    return list(dict.fromkeys(recorder.specs))


def _worker(compiler, specs, bundle, failures):
    os.makedirs(bundle, exist_ok=True)
    while True:
        try:
            spec = specs.get_nowait()
        except queue.Empty:
            return
        run = subprocess.run([compiler, "--spec", spec, "-o", bundle], capture_output=True, text=True)
        if run.returncode != 0:
            failures.append(f"{spec}: {run.stderr.strip()[-2000:]}")


def build(specs, root, workers=None):
    """Builds the codegen-supported `specs` into bundles under `root` with
    `workers` (default: the CPU count) mhc-compile processes at a time, loads
    the bundles and returns (kernels built, seconds). A failed build raises."""
    compiler = shutil.which(mhc._C.compiler())
    assert compiler, "the GPU suite needs the kernel compiler (test/gpu/setup-gpu.sh sets MHC_COMPILER)"
    wanted = [s for s in specs if not mhc._C.unsupported_reason(s)]
    start = time.monotonic()
    todo, failures = queue.Queue(), []
    for s in wanted:
        todo.put(s)
    count = max(1, min(workers or os.cpu_count() or 1, len(wanted)))
    bundles = [os.path.join(str(root), f"bundle{i}") for i in range(count)]
    threads = [threading.Thread(target=_worker, args=(compiler, todo, b, failures)) for b in bundles]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, "mhc-compile failed:\n" + "\n".join(failures)
    for b in bundles:
        if os.path.exists(os.path.join(b, "index.json")):
            mhc.load_bundle(b)
    return len(wanted), time.monotonic() - start
