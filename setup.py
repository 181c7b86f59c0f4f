"""Builds the mhc Python package and its PyTorch extension (mhc._C).

    pip install --no-build-isolation .

against the installed torch. The extension holds the MLIR-free runtime and
torch.ops.mhc.*; kernels are compiled at run time by `mhc-compile` (the
compiler this repository builds with CMake: set MHC_COMPILER, put it on PATH,
or build it first so that build/bin/mhc-compile is packaged as mhc/bin/).
"""

import os
import shutil

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

root = os.path.dirname(os.path.abspath(__file__))
sources = [
    "runtime/torch/Module.cpp",
    "runtime/torch/Library.cpp",
    "runtime/torch/Checks.cpp",
    "runtime/torch/KernelPath.cpp",
    "runtime/torch/Specs.cpp",
    "runtime/torch/ProjectOps.cpp",
    "runtime/torch/ScaleOps.cpp",
    "runtime/torch/SinkhornOps.cpp",
    "runtime/torch/AggregateOps.cpp",
    "runtime/torch/ExpandCombineOps.cpp",
    "runtime/torch/PreOps.cpp",
    "runtime/torch/SeamOps.cpp",
    "runtime/torch/Autograd.cpp",
    "runtime/torch/AutogradSeam.cpp",
    "runtime/torch/Reference.cpp",
    "runtime/Bundles.cpp",
    "runtime/Compile.cpp",
    "runtime/CudaDriver.cpp",
    "runtime/KernelCache.cpp",
    "runtime/Posix.cpp",
    "runtime/Runtime.cpp",
    "lib/Bundle.cpp",
    "lib/KernelSpec.cpp",
    "lib/Manifest.cpp",
    "lib/Json.cpp",
    "lib/OpContract.cpp",
]

# Ship the compiler with the package when it has been built here.
compiler = os.path.join(root, "build", "bin", "mhc-compile")
package_data = {}
if os.path.exists(compiler):
    os.makedirs(os.path.join(root, "python", "mhc", "bin"), exist_ok=True)
    shutil.copy2(compiler, os.path.join(root, "python", "mhc", "bin", "mhc-compile"))
    package_data["mhc"] = ["bin/mhc-compile"]

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
)
