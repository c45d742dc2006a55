#!/bin/sh
# Runs the comparison scenario with quickcell and with quickjs-wasi on Node
# and prints the ratio (quickjs-wasi / quickcell) per step: above 1 means
# quickcell is faster. Not part of CI.
#
# The two sides run in alternation, ROUNDS times (ITERATIONS iterations
# each). Two tables follow: each step's median of its per-round medians,
# and each step's best per-round median. On a shared machine whose speed
# drifts (on this VM a process lands in a fast or a ~1.6× slower window,
# for both engines alike), back-to-back single runs compare one window
# with another; the best round compares each engine at its undisturbed
# speed.
#
#   benches/compare/compare.sh            # ROUNDS=3, ITERATIONS=50
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
export ITERATIONS="${ITERATIONS:-50}"
rounds="${ROUNDS:-3}"
(cd "$here" && [ -d node_modules ] || npm ci --silent)
(cd "$root" && cargo bench -q --profile test --features compiler --bench compare --no-run 2>/dev/null)
lines=""
i=0
while [ "$i" -lt "$rounds" ]; do
  qc=$(cd "$root" && cargo bench -q --profile test --features compiler --bench compare 2>/dev/null | tail -n 1)
  qw=$(cd "$here" && node quickjs-wasi.mjs | tail -n 1)
  echo "$qc"
  echo "$qw"
  lines="$lines$qc
$qw
"
  i=$((i + 1))
done
printf '%s' "$lines" | python3 -c '
import json, statistics, sys
runs = [json.loads(line) for line in sys.stdin if line.strip()]
def side(engine, pick):
    mine = [r for r in runs if r["engine"] == engine]
    steps = {s: pick([r["median_us"][s] for r in mine]) for s in mine[0]["median_us"]}
    return steps, mine[-1]["snapshot_bytes"]
for title, pick in [("medians of the per-round medians", statistics.median),
                    ("best per-round medians (each engine in its fastest window)", min)]:
    (qc, qc_bytes), (qw, qw_bytes) = side("quickcell", pick), side("quickjs-wasi", pick)
    print(f"{len(runs) // 2} rounds; {title}")
    print("%-10s %14s %16s %8s" % ("step", "quickcell µs", "quickjs-wasi µs", "ratio"))
    for step in ["create", "evaluate", "snapshot", "restore", "finish", "loop"]:
        a, b = qc[step], qw[step]
        print(f"{step:10} {a:14.1f} {b:16.1f} {b / a:8.2f}x")
    print("%-10s %14d %16d %8.2fx" % ("bytes", qc_bytes, qw_bytes, qw_bytes / qc_bytes))
'
