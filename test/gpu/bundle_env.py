"""Running a model from a prebuilt bundle alone (shared by test_bundle_gpu.py and
test_model_bundle_gpu.py): a JIT process's environment whose MHC_LOG names the
specs it compiles, `mhc precompile` of them, and an environment with the kernel
compiler out of reach, an unusable cache directory and MHC_BUNDLE_PATH."""

import os
import re
import shutil
import subprocess
import sys

import torch

import mhc

SPEC_LINE = re.compile(r"^\[mhc\] \w+: kernel \S+ \[(.+)\]$", re.M)
COMPILER_TOOLS = ("mhc-compile", "mhc-opt")


def kernel_compiler():
    compiler = shutil.which(mhc._C.compiler())
    assert compiler, "the GPU suite needs the kernel compiler (test/gpu/setup-gpu.sh sets MHC_COMPILER)"
    return compiler


def without_mhc(env=os.environ):
    return {k: v for k, v in env.items() if not k.startswith("MHC_")}


def jit_env(tmp_path, compiler, **extra):
    """A fresh cache, the compiler, MHC_LOG=1 (each kernel taken is logged with its spec)."""
    return {**without_mhc(), "MHC_COMPILER": compiler, "MHC_LOG": "1", "MHC_CACHE_DIR": str(tmp_path / "cache"),
            **extra}


def logged_specs(log):
    """The distinct specs of the kernels a JIT process's MHC_LOG=1 reports taking."""
    return sorted(set(SPEC_LINE.findall(log)))


def precompile(specs, bundle, compiler):
    """`mhc precompile --specs FILE` of `specs` into the directory `bundle`."""
    listing = bundle.parent / (bundle.name + ".specs")
    listing.write_text("".join(s + "\n" for s in specs))
    pre = subprocess.run([sys.executable, "-m", "mhc", "precompile", "--specs", str(listing), "-o", str(bundle),
                          "--mhc-compile", compiler], capture_output=True, text=True)
    assert pre.returncode == 0, pre.stdout + pre.stderr


def path_without_compiler():
    """$PATH less every directory holding mhc-compile or mhc-opt (the host C
    compiler stays: Triton builds its launchers with it under torch.compile)."""
    dirs = [d for d in os.environ.get("PATH", "").split(os.pathsep)
            if d and not any(os.path.exists(os.path.join(d, t)) for t in COMPILER_TOOLS)]
    return os.pathsep.join([os.path.dirname(sys.executable)] + dirs)


def hidden_env(tmp_path, bundle, path=None, **extra):
    """No kernel compiler (PATH = `path`, default only Python's directory;
    MHC_COMPILER names a missing file), a cache directory under a regular file
    (unusable) and MHC_BUNDLE_PATH = `bundle`."""
    path = path or os.path.dirname(sys.executable)
    assert not any(shutil.which(t, path=path) for t in COMPILER_TOOLS), path
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    return {**without_mhc(), "PATH": path, "MHC_COMPILER": str(tmp_path / "none"),
            "MHC_CACHE_DIR": str(blocker / "cache"), "MHC_BUNDLE_PATH": str(bundle), **extra}


def run_script(script, out, env, *args):
    """Runs `script` (python -c) with argv [out, *args]; what it saved to `out`, and its stderr."""
    run = subprocess.run([sys.executable, "-c", script, str(out), *args], capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stderr[-6000:]
    return torch.load(out), run.stderr
