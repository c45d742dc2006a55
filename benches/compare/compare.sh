#!/bin/sh
# Runs the comparison scenario with quickcell and with quickjs-wasi on Node
# and prints both JSON lines and the ratio (quickjs-wasi / quickcell) per
# step: above 1 means quickcell is faster. Not part of CI.
#
#   benches/compare/compare.sh            # ITERATIONS=50 by default
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
export ITERATIONS="${ITERATIONS:-50}"
(cd "$here" && [ -d node_modules ] || npm ci --silent)
qc=$(cd "$root" && cargo bench -q --profile dev --bench compare 2>/dev/null | tail -n 1)
qw=$(cd "$here" && node quickjs-wasi.mjs | tail -n 1)
echo "$qc"
echo "$qw"
python3 - "$qc" "$qw" <<'PY'
import json, sys
qc, qw = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(f"{'step':10} {'quickcell µs':>14} {'quickjs-wasi µs':>16} {'ratio':>8}")
for step in ["create", "evaluate", "snapshot", "restore", "finish"]:
    a, b = qc["median_us"][step], qw["median_us"][step]
    print(f"{step:10} {a:14.1f} {b:16.1f} {b / a:8.2f}x")
print(f"{'bytes':10} {qc['snapshot_bytes']:14d} {qw['snapshot_bytes']:16d} {qw['snapshot_bytes'] / qc['snapshot_bytes']:8.2f}x")
PY
