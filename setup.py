"""Builds the mhc Python package and its PyTorch extension (mhc._C).

    pip install --no-build-isolation .

against the installed torch. The extension holds the MLIR-free runtime and
torch.ops.mhc.*; kernels are compiled at run time by `mhc-compile` (the
compiler this repository builds with CMake: build it first and the package
carries it, self-contained, in mhc/bin and mhc/lib; or set MHC_COMPILER, or
put it on PATH).
"""

import os
import shutil
import subprocess

import torch
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

root = os.path.dirname(os.path.abspath(__file__))
sources = [
    "runtime/torch/Module.cpp",
    "runtime/torch/Library.cpp",
    "runtime/torch/Checks.cpp",
    "runtime/torch/KernelPath.cpp",
    "runtime/torch/Specs.cpp",
    "runtime/torch/SpecOf.cpp",
    "runtime/torch/ProjectOps.cpp",
    "runtime/torch/ScaleOps.cpp",
    "runtime/torch/SinkhornOps.cpp",
    "runtime/torch/AggregateOps.cpp",
    "runtime/torch/PreBackwardOps.cpp",
    "runtime/torch/ExpandCombineOps.cpp",
    "runtime/torch/PreOps.cpp",
    "runtime/torch/SeamOps.cpp",
    "runtime/torch/Autograd.cpp",
    "runtime/torch/AutogradSeam.cpp",
    "runtime/torch/InferenceOps.cpp",
    "runtime/torch/Reference.cpp",
    "runtime/Bundles.cpp",
    "runtime/Compile.cpp",
    "runtime/CudaDriver.cpp",
    "runtime/KernelCache.cpp",
    "runtime/Posix.cpp",
    "runtime/Runtime.cpp",
    "lib/Bundle.cpp",
    "lib/KernelSpec.cpp",
    "lib/KernelSpecParse.cpp",
    "lib/KernelSpecRules.cpp",
    "lib/Manifest.cpp",
    "lib/ManifestRead.cpp",
    "lib/Json.cpp",
    "lib/OpContract.cpp",
]

# The wheel carries the compiler with every shared library it loads beyond the
# C/C++ runtime (LLVM, z3, libxml2, ...), so kernels compile on a machine
# without LLVM: mhc/bin/mhc-compile is a wrapper that puts mhc/lib first on the
# loader's path and runs mhc/bin/mhc-compile.bin. Without a built compiler
# (or with MHC_SHIP_COMPILER=0) the package has none: kernels then come from
# bundles (MHC_BUNDLE_PATH, mhc.load_bundle), else MHC_COMPILER / PATH, else
# the reference path, with a warning naming the spec.
SYSTEM_LIBS = ("linux-vdso", "ld-linux", "libc.so", "libm.so", "libstdc++.so", "libgcc_s.so",
               "libpthread.so", "libdl.so", "librt.so")
WRAPPER = """#!/bin/sh
# mhc-compile with the shared libraries shipped beside it (setup.py).
here=$(dirname "$(readlink -f "$0")")
LD_LIBRARY_PATH="$here/../lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$here/mhc-compile.bin" "$@"
"""


def shared_libraries(binary):
    """The resolved paths of the libraries `binary` loads, less the C/C++ runtime's."""
    out = subprocess.run(["ldd", binary], check=True, capture_output=True, text=True).stdout
    paths = [line.split("=>")[1].split("(")[0].strip() for line in out.splitlines() if "=>" in line]
    return [p for p in paths if p and not any(os.path.basename(p).startswith(s) for s in SYSTEM_LIBS)]


def ship_compiler():
    compiler = os.path.join(root, "build", "bin", "mhc-compile")
    pkg = os.path.join(root, "python", "mhc")
    for d in ("bin", "lib"):
        shutil.rmtree(os.path.join(pkg, d), ignore_errors=True)
    if not os.path.exists(compiler) or os.environ.get("MHC_SHIP_COMPILER") == "0":
        return {}
    os.makedirs(os.path.join(pkg, "bin"))
    os.makedirs(os.path.join(pkg, "lib"))
    shutil.copy2(compiler, os.path.join(pkg, "bin", "mhc-compile.bin"))
    for lib in shared_libraries(compiler):
        shutil.copy2(lib, os.path.join(pkg, "lib", os.path.basename(lib)))  # follows symlinks
    wrapper = os.path.join(pkg, "bin", "mhc-compile")
    with open(wrapper, "w") as f:
        f.write(WRAPPER)
    os.chmod(wrapper, 0o755)
    return {"mhc": ["bin/mhc-compile", "bin/mhc-compile.bin", "lib/*"]}


package_data = ship_compiler()

# The extension is built against this torch's C++ ABI, which changes between
# minor releases: the package requires the same major.minor.
major, minor = (int(v) for v in torch.__version__.split("+")[0].split(".")[:2])

setup(
    name="mhc",
    version="0.1.0",
    description="Manifold-Constrained Hyper-Connections: generated GPU kernels for PyTorch",
    package_dir={"": "python"},
    packages=["mhc"],
    package_data=package_data,
    ext_modules=[
        CUDAExtension(
            name="mhc._C",
            sources=sources,
            include_dirs=[os.path.join(root, "include"), os.path.join(root, "runtime", "torch")],
            extra_compile_args={"cxx": ["-O2", "-std=c++17"]},
            libraries=["dl"],
        )
    ],
    cmdclass={"build_ext": BuildExtension},
    entry_points={"console_scripts": ["mhc = mhc.cli:main"]},
    python_requires=">=3.9",
    install_requires=[f"torch>={major}.{minor},<{major}.{minor + 1}"],
)
