#!/usr/bin/env bash
# The whole test suite on a GPU machine, exactly as CI runs it on the CPU: install the project
# (editable, no dependency resolution: the GPU libraries are already there, often from
# PYTHONPATH), then `python3 -m pytest -q`. The log goes to $1 (default: gpu-pytest.log) and
# the exit status is pytest's. Usage: bash ci/gpu_pytest.sh [LOGFILE]
set -uo pipefail
cd "$(dirname "$0")/.."
log=${1:-gpu-pytest.log}
mkdir -p "$(dirname "$log")"
export PIP_DISABLE_PIP_VERSION_CHECK=1
{
  echo "# $(date -u +%FT%TZ) $(git rev-parse HEAD 2>/dev/null || echo no-git) on $(hostname)"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 || true
} >"$log"
if ! python3 -m pip install -q --no-deps --no-build-isolation -e . >>"$log" 2>&1; then
  echo "gpu_pytest: installing the project failed; see $log" >&2
  exit 1
fi
python3 -m pytest -q 2>&1 | tee -a "$log"
exit "${PIPESTATUS[0]}"
