#!/usr/bin/env bash
# The whole test suite on a GPU machine: install the project (editable, no dependency
# resolution: the GPU libraries are already there, often from PYTHONPATH), then every test of
# `python3 -m pytest -q`'s collection, run as $SHARDS parallel pytest processes
# (ci/pytest_shards.py: plain pytest, no xdist; round-robin over the GPUs CUDA_VISIBLE_DEVICES
# allows; the GPU-timing tests alone at the end). The combined log (one summary line per shard,
# every failure, the slowest tests) goes to $1 (default: gpu-pytest.log), each shard's log to
# $(dirname $1)/shards/; exit 1 if any shard failed. SHARDS=1 is the plain serial run.
# About 2-4 minutes on a 16-32-core H200 machine (SHARDS default: cores/4, at most 8).
# Usage: [SHARDS=N] [SHARD_TIMEOUT=S] bash ci/gpu_pytest.sh [LOGFILE]
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
# No tee: a time limit that stops a pipe loses the summary (2026-11-30); the runner writes it.
python3 ci/pytest_shards.py --log "$log"
