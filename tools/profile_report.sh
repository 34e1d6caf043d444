#!/usr/bin/env bash
# Where `harness report` spends its time on this machine (no GPU needed): the cores it sees,
# matplotlib's font cache, the parent's imports, and the wall time of one 360-row page with
# --jobs 1/2/4/8 and the default, twice each. Usage: bash tools/profile_report.sh [RUN] [OUT_DIR]
set -uo pipefail
cd "$(dirname "$0")/.."
RUN=${1:-reports/h200/2026-12-02/decode-minute-2/run-a}
OUT=${2:-$(mktemp -d)}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
echo "cores: nproc $(nproc), affinity $($PY -c 'import os; print(len(os.sched_getaffinity(0)))'); $(grep -m1 'model name' /proc/cpuinfo)"
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
$PY -c 'import matplotlib, os; d = matplotlib.get_cachedir(); print("matplotlib cache:", d, sorted(os.listdir(d)) if os.path.isdir(d) else "missing")'
$PY -X importtime -m harness report "$RUN" -o "$OUT/imports.html" 2> "$OUT/importtime.txt" > /dev/null
echo "parent imports, slowest cumulative:"; sort -t'|' -k2 -n -r "$OUT/importtime.txt" | head -12
grep -qE '\| +torch$' "$OUT/importtime.txt" && echo "torch IS imported by the report" || echo "torch not imported"
for j in 1 2 4 8 default; do
  for k in 1 2; do
    flag=(); [ "$j" != default ] && flag=(--jobs "$j")
    t=$( { TIMEFORMAT=%R; time $PY -m harness report "$RUN" -o "$OUT/j$j.html" "${flag[@]}" > /dev/null; } 2>&1 )
    echo "jobs $j run $k: $t s (load $(cut -d' ' -f1 /proc/loadavg))"
  done
done
cmp -s "$OUT/j1.html" "$OUT/jdefault.html" && echo "pages identical (--jobs 1 vs default)" || echo "PAGES DIFFER"
