#!/usr/bin/env bash
# The lowest-versions job (.ci/run): a fresh venv with every core dependency at the floor
# pyproject.toml allows (`name>=X` installed as `name==X`), then a short smoke: the CLI starts,
# a suite validates, a CPU run whose statuses must match the gate's baseline, its report, a few
# test files (records, spec, the floors' own reasons). A floor that no longer works fails here instead of at a user's import.
# torch's floor comes from PyPI (the CUDA wheel; it runs CPU-only) with the machine's pip config
# bypassed for that one install, so a cap in CI's own pip constraints cannot block the floor:
# torch 2.5 with its CUDA libraries is about 5 GB installed, most of the job's time (docs/ci.md).
# LOWEST_TORCH=skip keeps the torch CI installs instead (from local disk, no download);
# TORCH_INDEX=https://download.pytorch.org/whl/cpu takes the floor from an index with CPU builds
# (no CUDA libraries) where one is reachable.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${LOWEST_VENV:-/tmp/attn-harness-lowest}
TORCH_INDEX=${TORCH_INDEX:-}
LOWEST_TORCH=${LOWEST_TORCH:-floor}
if [ "$LOWEST_TORCH" != floor ] && [ "$LOWEST_TORCH" != skip ]; then
    echo "ci/lowest_deps.sh: LOWEST_TORCH=$LOWEST_TORCH: expected skip, or unset for torch's floor" >&2
    exit 2
fi
rm -rf "$VENV"
python3 -m venv "$VENV"
PY="$VENV/bin/python"
# name==floor for each `name>=floor` in [project].dependencies
"$PY" - > "$VENV/floors.txt" <<'PYEOF'
import re, tomllib
deps = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]
for d in deps:
    m = re.fullmatch(r"\s*([A-Za-z0-9_.\-]+)\s*>=\s*([^,;\s]+)\s*", d.split("#")[0])
    if not m:
        raise SystemExit(f"pyproject.toml: dependency {d!r} is not `name>=floor`; ci/lowest_deps.sh reads only that form")
    print(f"{m[1]}=={m[2]}")
PYEOF
echo "floors: $(tr '\n' ' ' < "$VENV/floors.txt")"
case "$LOWEST_TORCH" in
    floor) TORCH_REQ=$(grep -i '^torch==' "$VENV/floors.txt") ;;
    skip) TORCH_REQ="torch==$(python3 -c 'import torch; print(torch.__version__.split("+")[0])')" ;;
esac
echo "torch: $TORCH_REQ (LOWEST_TORCH=$LOWEST_TORCH)"
if [ "$LOWEST_TORCH" = skip ]; then
    "$PY" -m pip install -q "$TORCH_REQ"
elif [ -n "$TORCH_INDEX" ]; then
    "$PY" -m pip install -q --index-url "$TORCH_INDEX" "$TORCH_REQ"
else
    PIP_CONFIG_FILE=/dev/null "$PY" -m pip install -q "$TORCH_REQ"
fi
grep -iv '^torch==' "$VENV/floors.txt" > "$VENV/floors-but-torch.txt"
"$PY" -m pip install -q -c "$VENV/floors-but-torch.txt" -r "$VENV/floors-but-torch.txt" pytest pytest-xdist jsonschema
"$PY" -m pip install -q --no-deps -e .
"$PY" -m pip check
"$PY" -m pip list 2>/dev/null | grep -iE "^(torch|pydantic|pyyaml|rich|numpy|pandas|matplotlib|jinja2|packaging|pillow) " | tr -s ' ' | tr '\n' ';'; echo
H="$VENV/bin/harness"
OUT=$(mktemp -d)
"$H" --version
"$H" validate ci/smoke.yaml
"$H" run ci/smoke.yaml --device cpu --no-time --out "$OUT/run" > /dev/null
# Statuses against the committed baseline: a cell that errors under a floor (torch 2.4 on the
# CPU: "index_put" not implemented for fp8) fails the job, not only a crash.
"$H" gate --correctness-only --results "$OUT/run" > "$OUT/gate.md" || { cat "$OUT/gate.md"; exit 1; }
"$H" report "$OUT/run" -o "$OUT/report.html" > /dev/null
"$PY" -m pytest -q -n 2 -p no:cacheprovider tests/records/test_results_rows.py tests/spec/test_spec.py \
    tests/project/test_dependency_floors.py
rm -rf "$OUT"
echo "lowest versions: OK"
