#!/usr/bin/env python3
"""Whole-process cold start of `quickcell exec` next to `node -e 0`.

    python3 benches/cold_start.py [--runs N] [--no-compile] [BINARY]

Each round runs, alternating, on a fresh machine as far as quickcell can
tell (an empty HOME, no XDG directories, no module cache, an empty working
directory for the state):

  node        `node -e 0`, the bare Node process
  first       `quickcell exec --code "return 1 + 1"`: the first cell, with
              the precompiled guest embedded in the binary
  warm        the same command again in the same HOME (state exists)

and, every fourth round (it takes seconds), with
QUICKCELL_IGNORE_PRECOMPILED=1, i.e. what a machine the embedded artifact
does not fit does, and what quickcell did everywhere before it carried the
artifact:

  compile     the first cell: pre-initialize and compile, then cache
  cached      the same command again: the module from the on-disk cache

`--no-compile` leaves these out (a binary built without the `compiler`
feature cannot compile). Prints the median and min of each, in
milliseconds.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time


def timed(argv, env, cwd):
    start = time.perf_counter()
    out = subprocess.run(argv, env=env, cwd=cwd, capture_output=True)
    elapsed = (time.perf_counter() - start) * 1000
    if out.returncode != 0:
        raise SystemExit(f"{argv} failed: {out.stderr.decode()[-2000:]}")
    return elapsed


def fresh_env(home):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("XDG_", "QUICKCELL_", "RUST_LOG"))}
    env["HOME"] = home
    return env


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("binary", nargs="?", default="target/dist/quickcell")
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--no-compile", action="store_true")
    args = parser.parse_args()
    binary = os.path.abspath(args.binary)
    cell = [binary, "exec", "--code", "return 1 + 1"]
    times = {"node": [], "first": [], "warm": [], "compile": [], "cached": []}
    for round_ in range(args.runs):
        home = tempfile.mkdtemp(prefix="quickcell-cold-")
        try:
            env = fresh_env(home)
            times["node"].append(timed(["node", "-e", "0"], env, home))
            times["first"].append(timed(cell, env, home))
            times["warm"].append(timed(cell, env, home))
            if round_ % 4 == 0 and not args.no_compile:
                other = tempfile.mkdtemp(prefix="quickcell-cold-")
                try:
                    env = fresh_env(other)
                    env["QUICKCELL_IGNORE_PRECOMPILED"] = "1"
                    times["compile"].append(timed(cell, env, other))
                    times["cached"].append(timed(cell, env, other))
                finally:
                    shutil.rmtree(other, ignore_errors=True)
        finally:
            shutil.rmtree(home, ignore_errors=True)
    print(f"binary {binary} ({os.path.getsize(binary) / 1e6:.1f} MB), {args.runs} rounds")
    for name, values in times.items():
        if values:
            print(f"  {name:8} median {statistics.median(values):8.1f} ms   "
                  f"min {min(values):8.1f} ms   (n={len(values)})")


if __name__ == "__main__":
    main()
