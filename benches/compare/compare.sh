#!/bin/sh
# Runs the comparison scenario with quickcell and with quickjs-wasi on Node
# and prints the ratio (quickjs-wasi / quickcell) per step: above 1 means
# quickcell is faster. Not part of CI.
#
# The two sides run in alternation, ROUNDS times (ITERATIONS iterations
# each), and each step's figure is the median of its per-round medians: on
# a shared machine whose speed drifts over minutes, back-to-back single
# runs compare one window with another.
#
#   benches/compare/compare.sh            # ROUNDS=3, ITERATIONS=50
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
export ITERATIONS="${ITERATIONS:-50}"
rounds="${ROUNDS:-3}"
(cd "$here" && [ -d node_modules ] || npm ci --silent)
(cd "$root" && cargo bench -q --profile dev --bench compare --no-run 2>/dev/null)
lines=""
i=0
while [ "$i" -lt "$rounds" ]; do
  qc=$(cd "$root" && cargo bench -q --profile dev --bench compare 2>/dev/null | tail -n 1)
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
def side(engine):
    mine = [r for r in runs if r["engine"] == engine]
    steps = {s: statistics.median(r["median_us"][s] for r in mine) for s in mine[0]["median_us"]}
    return steps, mine[-1]["snapshot_bytes"]
(qc, qc_bytes), (qw, qw_bytes) = side("quickcell"), side("quickjs-wasi")
print(f"{len(runs) // 2} rounds; medians of the per-round medians")
print("%-10s %14s %16s %8s" % ("step", "quickcell µs", "quickjs-wasi µs", "ratio"))
for step in ["create", "evaluate", "snapshot", "restore", "finish"]:
    a, b = qc[step], qw[step]
    print(f"{step:10} {a:14.1f} {b:16.1f} {b / a:8.2f}x")
print("%-10s %14d %16d %8.2fx" % ("bytes", qc_bytes, qw_bytes, qw_bytes / qc_bytes))
'
