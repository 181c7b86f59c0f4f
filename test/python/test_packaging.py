"""The installed package carries a self-contained compiler (setup.py).

CI builds the compiler before installing the package, so mhc/bin and mhc/lib
must be there: the wrapper runs mhc-compile.bin with every library it loads
beyond the C/C++ runtime taken from mhc/lib, not from the system's LLVM.
"""

import os
import subprocess

import mhc

PKG = os.path.dirname(mhc.__file__)
BIN, LIB = os.path.join(PKG, "bin"), os.path.join(PKG, "lib")
SYSTEM = ("linux-vdso", "ld-linux", "libc.so", "libm.so", "libstdc++.so", "libgcc_s.so", "libpthread.so",
          "libdl.so", "librt.so")


def _resolved(binary, env):
    out = subprocess.run(["ldd", binary], check=True, capture_output=True, text=True, env=env).stdout
    return {line.split("=>")[0].strip(): line.split("=>")[1].split("(")[0].strip()
            for line in out.splitlines() if "=>" in line}


def test_the_package_carries_the_compiler():
    assert os.access(os.path.join(BIN, "mhc-compile"), os.X_OK), \
        "no mhc/bin/mhc-compile: build the compiler (scripts/setup.sh) before installing the package"
    assert os.path.exists(os.path.join(BIN, "mhc-compile.bin"))
    assert os.environ.get("MHC_COMPILER", os.path.join(BIN, "mhc-compile")) == os.path.join(BIN, "mhc-compile")


def test_every_library_but_the_c_runtime_comes_from_the_package():
    env = {"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": LIB}
    libs = _resolved(os.path.join(BIN, "mhc-compile.bin"), env)
    assert any(name.startswith("libLLVM") for name in libs)
    for name, path in libs.items():
        if not name.startswith(SYSTEM):
            assert os.path.dirname(path) == LIB, f"{name} resolves to {path}, outside {LIB}"


def test_the_wrapper_runs_with_a_bare_environment():
    out = subprocess.run([os.path.join(BIN, "mhc-compile"), "--version-info"], check=True,
                         capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"}).stdout
    assert out.startswith("mhc ") and "MLIR 22" in out, out
