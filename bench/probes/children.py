"""What the decode probes' parents share: a child process per variant, its output echoed, its rows kept."""
import json
import subprocess
import sys


def child_rows(name, argv, env):
    """Runs `python3 argv` with `env`, echoing each output line prefixed by `name` as it comes (a run cut
    short still leaves them in the log), and returns its "ROW {json}" lines as {(C, M): row}."""
    rows = {}
    run = subprocess.Popen([sys.executable, *argv], env=env, stdout=subprocess.PIPE, text=True)
    for ln in run.stdout:
        print(f"{name} {ln}", end="", flush=True)
        if ln.startswith("ROW "):
            r = json.loads(ln[4:])
            rows[(r["C"], r["M"])] = r
    if run.wait():
        print(f"{name}: exit {run.returncode}", flush=True)
    return rows
