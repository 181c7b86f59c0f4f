"""Ahead-of-time bundles (CPU): `mhc precompile` builds a bundle with the real
compiler (mhc-compile and ptxas), and a process with the compiler hidden from
PATH, MHC_COMPILER pointing nowhere and an unusable cache directory resolves
every spec from the bundle (MHC_BUNDLE_PATH or mhc.load_bundle) without
compiling; a missing spec and a damaged bundle kernel are named. Resolution is
what a CUDA call does before loading the cubin (mhc._C.resolve_kernel); the
GPU suites run the kernels."""

import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

import mhc
from mhc import _C

ROOT = pathlib.Path(__file__).resolve().parents[2]
SPECS = [
    "aggregate.fwd;n=4;act=bf16;layout=nc;C=64",
    "expand_combine.fwd;n=4;act=bf16;layout=nc;C=64;bias=0",
]
ARCHS = ["sm_80", "sm_90a"]


def tool(name):
    """The built tool: the package's or $MHC_COMPILER's directory, else build/bin."""
    for d in (os.path.dirname(shutil.which(_C.compiler()) or ""), ROOT / "build" / "bin"):
        path = pathlib.Path(d) / name
        if d and path.is_file():
            return str(path)
    raise AssertionError(f"{name} is not built (cmake --build build): the bundle tests need it")


def cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "mhc", *args], capture_output=True, text=True,
                          env=env, cwd=ROOT)


def canonical(spec, arch):
    return _C.canonical_spec(f"{spec};arch={arch}")


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    out = tmp_path_factory.mktemp("aot") / "bundle"
    specs_file = out.parent / "specs.txt"
    specs_file.write_text(f"# a comment\n{SPECS[1]}\n\n")
    run = cli("precompile", "--spec", SPECS[0], "--specs", str(specs_file), "--arch", ",".join(ARCHS),
              "-o", str(out), "--mhc-compile", tool("mhc-compile"))
    assert run.returncode == 0, run.stdout + run.stderr
    return out, run.stdout


def no_compiler_env(tmp_path, **extra):
    """No mhc-compile on PATH or in MHC_COMPILER, and a cache directory that
    cannot exist (under a file): only bundles can serve kernels."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MHC_")}
    env.update(PATH=os.path.dirname(sys.executable), MHC_COMPILER=str(tmp_path / "no-compiler"),
               MHC_CACHE_DIR=str(blocker / "cache"), **extra)
    return env


RESOLVE = """
import sys, mhc
from mhc import _C
for d in sys.argv[2:]:
    print("loaded", mhc.load_bundle(d))
for spec in sys.argv[1].split("|"):
    print(_C.resolve_kernel(spec)["source"], _C.kernel_name(spec))
s = _C.stats()
print("stats", s["bundle_hits"], s["disk_hits"], s["compiles"])
"""


def resolve(specs, env, *bundles):
    return subprocess.run([sys.executable, "-c", RESOLVE, "|".join(specs), *map(str, bundles)],
                          capture_output=True, text=True, env=env)


def test_precompile_prints_a_line_per_kernel(bundle):
    out, stdout = bundle
    lines = [l for l in stdout.splitlines() if l.startswith("[")]
    wanted = [canonical(s, a) for a in ARCHS for s in SPECS]
    assert len(lines) == len(wanted) == 4
    for i, (line, spec) in enumerate(zip(lines, wanted), 1):
        assert line.startswith(f"[{i}/4] {_C.kernel_name(spec)} [{spec}]: built in "), line
        assert (out / f"{_C.kernel_name(spec)}.cubin").stat().st_size > 0
    assert stdout.splitlines()[-1] == f"bundle: {out} (4 kernels built, 0 failed)"


@pytest.mark.parametrize("how", ["MHC_BUNDLE_PATH", "load_bundle"])
def test_bundle_serves_every_spec_without_a_compiler(bundle, tmp_path, how):
    out, _ = bundle
    wanted = [canonical(s, a) for a in ARCHS for s in SPECS]
    if how == "MHC_BUNDLE_PATH":
        run = resolve(wanted, no_compiler_env(tmp_path, MHC_BUNDLE_PATH=f"{tmp_path}/none:{out}"))
    else:
        run = resolve(wanted, no_compiler_env(tmp_path), out)
    assert run.returncode == 0, run.stderr
    got = run.stdout.splitlines()
    assert got[-1] == "stats 4 0 0"  # bundle hits, disk hits, compiles
    assert [l for l in got if not l.startswith(("loaded", "stats"))] == \
        [f"bundle {_C.kernel_name(s)}" for s in wanted]


def test_missing_spec_is_named(bundle, tmp_path):
    out, _ = bundle
    missing = canonical("aggregate.fwd;n=4;act=bf16;layout=nc;C=128", "sm_90a")
    run = resolve([missing], no_compiler_env(tmp_path, MHC_BUNDLE_PATH=str(out)))
    assert run.returncode != 0
    assert f"no kernel for [{missing}]" in run.stderr
    assert f"not in the bundles {out}" in run.stderr
    assert "cannot run the kernel compiler" in run.stderr


def test_damaged_bundle_kernel_is_reported_and_skipped(bundle, tmp_path):
    out, _ = bundle
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    spec = canonical(SPECS[0], "sm_90a")
    cubin = copy / f"{_C.kernel_name(spec)}.cubin"
    image = bytearray(cubin.read_bytes())
    image[len(image) // 2] ^= 0xFF  # one damaged byte, same size
    cubin.write_bytes(bytes(image))
    run = resolve([spec], no_compiler_env(tmp_path, MHC_BUNDLE_PATH=str(copy)))
    assert run.returncode != 0
    assert f"skipping kernel {_C.kernel_name(spec)} of the bundle {copy}" in run.stderr
    assert "checksum mismatch" in run.stderr
    assert f"no kernel for [{spec}]" in run.stderr


def test_load_bundle_rejects_a_directory_without_an_index(tmp_path):
    with pytest.raises(ValueError, match=r"load_bundle\(directory=.*no index.json"):
        mhc.load_bundle(tmp_path)


def test_precompile_a_model_graph(tmp_path):
    graph = ROOT / "examples" / "transformer_n4.mlir"
    out = tmp_path / "bundle"
    run = cli("precompile", "--graph", str(graph), "--arch", "sm_90a", "-o", str(out),
              "--mhc-compile", tool("mhc-compile"), "--mhc-opt", tool("mhc-opt"))
    assert run.returncode == 0, run.stdout + run.stderr
    # The kernels mhc-opt's own --mhc-write-bundle makes of the graph: the same set.
    ref = tmp_path / "reference"
    subprocess.run([tool("mhc-opt"), str(graph), "--mhc-expand-layers", "--canonicalize", "--cse",
                    "--mhc-fuse-pre", "--mhc-specialize=arch=sm_90a", "--mhc-generate-kernels",
                    f"--mhc-write-bundle=dir={ref}", "-o", os.devnull], check=True)
    expected = sorted(p.name for p in ref.glob("*.cubin"))
    assert expected and sorted(p.name for p in out.glob("*.cubin")) == expected
    lines = [l for l in run.stdout.splitlines() if l.startswith("[")]
    assert len(lines) == len(expected) and all(": built in " in l for l in lines)
    run = resolve([_C.canonical_spec(s) for s in _index_specs(out)], no_compiler_env(tmp_path), out)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[-1] == f"stats {len(expected)} 0 0"


def _index_specs(bundle_dir):
    return [k["spec"] for k in json.loads((bundle_dir / "index.json").read_text())["kernels"]]


def test_precompile_keeps_a_specs_own_arch_without_arch_option(tmp_path):
    # The spec names its arch (as MHC_LOG prints it); with no --arch that arch is built.
    spec = canonical(SPECS[0], "sm_100a")
    out = tmp_path / "bundle"
    run = cli("precompile", "--spec", spec, "-o", str(out), "--mhc-compile", tool("mhc-compile"))
    assert run.returncode == 0, run.stdout + run.stderr
    assert (out / f"{_C.kernel_name(spec)}.cubin").stat().st_size > 0
    index = json.loads((out / "index.json").read_text())
    assert [k["spec"] for k in index["kernels"]] == [spec]
