"""The `mhc` command line (also `python -m mhc`).

    mhc precompile --spec 'aggregate.fwd;n=4;act=bf16;layout=nc;C=2048' --arch sm_90a,sm_100a -o bundle/
    mhc precompile --specs specs.txt --graph examples/transformer_n4.mlir --arch sm_90a -o bundle/
    mhc export model.py:make_model -o model.mlir [--backward] [--static-tokens]

`precompile` builds, with `mhc-compile`, every kernel that the specs (`--spec`,
`--specs FILE`: one a line, '#' comments) and the model graphs (`--graph`, the
mhc dialect: what `mhc-opt`'s pipeline specialises them to) need, for each
arch, into a kernel bundle directory, printing a line per kernel. A machine
with the bundle runs them without a compiler: MHC_BUNDLE_PATH=bundle, or
mhc.load_bundle("bundle").
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import time

from . import _C

# scripts/example.sh's pipeline up to specialisation.
GRAPH_PIPELINE = ["--mhc-expand-layers", "--canonicalize", "--cse", "--mhc-fuse-pre"]
SPEC_ATTR = re.compile(r'#mhc\.spec<"([^"]+)">')


def _tool(name, given, env):
    """The path of a tool: `given`, else $env, else next to the kernel
    compiler, else on PATH; exits with a message naming how to provide it."""
    candidates = [given, os.environ.get(env)]
    compiler = shutil.which(_C.compiler())
    if compiler:
        candidates.append(os.path.join(os.path.dirname(compiler), name))
    candidates.append(shutil.which(name))
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    sys.exit(f"mhc precompile: cannot find {name} (pass --{name} or set {env})")


def _with_arch(spec, arch):
    """`spec` for `arch`; without --arch (arch None) the spec's own arch."""
    if arch is None:
        return spec
    fields = [f for f in spec.split(";") if f and not f.startswith("arch=")]
    return ";".join(fields + ([f"arch={arch}"] if arch else []))


def _read_specs(path):
    with open(path) as f:
        return [line.split("#", 1)[0].strip() for line in f if line.split("#", 1)[0].strip()]


def _graph_specs(opt, graph, arch):
    """The specs mhc-opt's pipeline stamps on the kernel ops of `graph`."""
    command = [opt, graph, *GRAPH_PIPELINE, f"--mhc-specialize=arch={arch}"]
    run = subprocess.run(command, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"mhc precompile: {' '.join(command)} failed:\n{run.stderr}")
    return SPEC_ATTR.findall(run.stdout)


def _requested(args, parser):
    """The distinct canonical specs to build, in order of first mention."""
    archs = [a for a in (args.arch or "").split(",") if a] or [None]
    given = list(args.spec or [])
    for path in args.specs or []:
        given += _read_specs(path)
    specs = []
    for arch in archs:
        for s in given:
            specs.append(_with_arch(s, arch))
    if args.graph:
        if archs == [None]:
            parser.error("--graph needs --arch")
        opt = _tool("mhc-opt", args.mhc_opt, "MHC_OPT")
        for arch in archs:
            for graph in args.graph:
                specs += _graph_specs(opt, graph, arch)
    canonical = []
    for s in specs:
        try:
            c = _C.canonical_spec(s)
        except ValueError as e:
            parser.error(f"--spec {s!r}: {e}")
        if c not in canonical:
            canonical.append(c)
    if not canonical:
        parser.error("no kernels: give --spec, --specs or --graph")
    return canonical


def precompile(args, parser):
    specs = _requested(args, parser)
    compiler = _tool("mhc-compile", args.mhc_compile, "MHC_COMPILER")
    os.makedirs(args.output, exist_ok=True)
    built = failed = 0
    for i, spec in enumerate(specs, 1):
        head = f"[{i}/{len(specs)}] {_C.kernel_name(spec)} [{spec}]"
        reason = _C.unsupported_reason(spec)
        if reason:
            print(f"{head}: skipped, the reference path runs it ({reason})", flush=True)
            continue
        start = time.monotonic()
        run = subprocess.run([compiler, "--spec", spec, "-o", args.output],
                             capture_output=True, text=True)
        if run.returncode != 0:
            failed += 1
            print(f"{head}: FAILED\n{run.stderr.rstrip()}", flush=True)
            continue
        built += 1
        print(f"{head}: built in {time.monotonic() - start:.1f} s", flush=True)
    print(f"bundle: {args.output} ({built} kernels built, {failed} failed)")
    return 1 if failed else 0


def _load_factory(where):
    """The callable named by 'path/to/file.py:name' or 'package.module:name'."""
    import importlib
    import importlib.util

    source, sep, name = where.rpartition(":")
    if not sep or not source or not name:
        sys.exit(f"mhc export: {where!r} must be FILE.py:FUNCTION or MODULE:FUNCTION")
    if source.endswith(".py"):
        spec = importlib.util.spec_from_file_location("_mhc_export_model", source)
        if spec is None or not os.path.isfile(source):
            sys.exit(f"mhc export: no such file {source!r}")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(source)
    factory = getattr(module, name, None)
    if not callable(factory):
        sys.exit(f"mhc export: {source} has no function {name!r}")
    return factory


def export(args):
    """`mhc export`: a model's graph in the mhc dialect (mhc.export.export)."""
    import torch

    from . import export as exporter

    if args.model.endswith(".pt2"):
        model, inputs = torch.export.load(args.model), ()
    else:
        made = _load_factory(args.model)()
        if not (isinstance(made, tuple) and len(made) == 2):
            sys.exit("mhc export: the factory must return (model, example_inputs)")
        model, inputs = made
    exporter.export(model, inputs, args.output, backward=args.backward, dynamic_tokens=not args.static_tokens)
    print(f"wrote {args.output}")
    return 0


EXPORT_HELP = """Writes a PyTorch model's graph in the mhc dialect (mhc.export.export): the
mHC ops as mhc ops, every other part of the model as calls to opaque
functions, parameters as arguments; then mhc-opt (or mhc precompile --graph)
fuses, specialises and builds its kernels.

MODEL is FILE.py:FUNCTION or MODULE:FUNCTION, a function returning
(model, example_inputs), or a torch.export.save'd program (.pt2).
"""


def main(argv=None):
    parser = argparse.ArgumentParser(prog="mhc", description="mhc command line tools")
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("precompile", help="build kernels into a bundle directory",
                            description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--spec", action="append", help="a kernel spec (repeatable)")
    p.add_argument("--specs", action="append", metavar="FILE", help="a file of specs, one a line")
    p.add_argument("--graph", action="append", metavar="MLIR", help="a model graph in the mhc dialect")
    p.add_argument("--arch", help="comma-separated archs (sm_80, sm_90a, sm_100a); replaces each spec's")
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="the bundle directory")
    p.add_argument("--mhc-compile", help="the kernel compiler (default: $MHC_COMPILER, mhc-compile)")
    p.add_argument("--mhc-opt", help="mhc-opt, for --graph (default: $MHC_OPT, next to mhc-compile, PATH)")
    e = commands.add_parser("export", help="a PyTorch model's graph in the mhc dialect",
                            description=EXPORT_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    e.add_argument("model", metavar="MODEL", help="FILE.py:FUNCTION, MODULE:FUNCTION or a .pt2 file")
    e.add_argument("-o", "--output", required=True, metavar="MLIR", help="the .mlir file to write")
    e.add_argument("--backward", action="store_true", help="add @backward, the gradient graph")
    e.add_argument("--static-tokens", action="store_true", help="keep the example's token counts (default: ?)")
    args = parser.parse_args(argv)
    if args.command == "export":
        return export(args)
    return precompile(args, p)


if __name__ == "__main__":
    sys.exit(main())
