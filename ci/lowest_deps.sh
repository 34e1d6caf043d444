#!/usr/bin/env bash
# The lowest-versions job (.ci/run): a fresh venv with every core dependency at the floor
# pyproject.toml allows (`name>=X` installed as `name==X`), then a short smoke: the CLI starts,
# a suite validates, a CPU run and its report, the records tests. A floor that no longer works
# fails here instead of at a user's import. torch: the PyPI wheel of the floor pulls ~2.5 GB of
# CUDA libraries, so by default the job keeps the torch CI installs (from local disk) and tests
# torch's floor only with TORCH_INDEX set to an index with CPU builds
# (TORCH_INDEX=https://download.pytorch.org/whl/cpu).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${LOWEST_VENV:-/tmp/attn-harness-lowest}
TORCH_INDEX=${TORCH_INDEX:-}
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
if [ -n "$TORCH_INDEX" ]; then
    "$PY" -m pip install -q --index-url "$TORCH_INDEX" "$(grep -i '^torch==' "$VENV/floors.txt")"
else
    "$PY" -m pip install -q "torch==$(python3 -c 'import torch; print(torch.__version__.split("+")[0])')"
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
"$H" report "$OUT/run" -o "$OUT/report.html" > /dev/null
"$PY" -m pytest -q -n 2 -p no:cacheprovider tests/test_results_rows.py tests/test_spec.py
rm -rf "$OUT"
echo "lowest versions: OK"
