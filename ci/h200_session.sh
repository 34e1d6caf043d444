#!/usr/bin/env bash
# Runs ON THE GPU MACHINE after the GPU libraries are installed (see docs/gpu-sessions.md):
#   source .devkit/bin/env.sh && bash ci/h200_session.sh PHASE
# Two lanes run side by side on a 2-GPU machine: lane 0 (GPU 0) does everything that is timed,
# lane 1 (GPU 1) the correctness-only runs and the GPU test suite, so timed cells never share a
# GPU with other work. With one GPU the lanes run one after the other. Each step has its own
# time limit (SIGINT: the harness keeps every finished row), so one hang cannot eat the call.
# Results: $OUT/results-PHASE.tgz (every results folder) and $OUT/session-PHASE.log.
#   DRY=1 bash ci/h200_session.sh PHASE   checks every command's flags on a CPU machine
#                                          (each step limited to a few seconds, CPU backends).
set -uo pipefail
PHASE=${1:?phase: A or B}
OUT=${OUT:-/tmp/out}
R=${R:-/tmp/h200-results}
mkdir -p "$R" "$OUT"
export PYTHONWARNINGS=ignore
export TVM_FFI_DISABLE_TORCH_C_DLPACK=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
H="python3 -m harness.cli"
LOG="$OUT/session-$PHASE.log"
NGPU=$(python3 -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)
DRY=${DRY:-0}
END=$((SECONDS + ${BUDGET:-560}))   # seconds this phase may take in all (a device call ends at 600)

step() {  # step SECONDS NAME COMMAND...: run with a limit, log to $R/logs/NAME.log
  local limit=$1 name=$2; shift 2
  # The whole phase must end inside one device call: cap each step at what is left of BUDGET.
  local left=$((END - SECONDS))
  if [ "$left" -lt 15 ]; then echo "=== SKIP $name: phase budget spent" | tee -a "$LOG"; return 0; fi
  [ "$limit" -gt "$left" ] && limit=$left
  if [ "$DRY" = 1 ]; then  # flags and paths only: a few seconds each, no installs
    limit=8; [ "$1" = bash ] && { echo "=== DRY skip $name: $*" | tee -a "$LOG"; return 0; }
  fi
  mkdir -p "$R/logs"
  echo "=== $(date +%T) [gpu ${CUDA_VISIBLE_DEVICES:-all}] $name (limit ${limit}s): $*" | tee -a "$LOG"
  local t0=$SECONDS
  timeout --signal=INT --kill-after=20 "$limit" "$@" >"$R/logs/$name.log" 2>&1
  local rc=$?
  echo "=== $(date +%T) $name rc=$rc in $((SECONDS - t0))s" | tee -a "$LOG"
  tail -n 25 "$R/logs/$name.log" | sed "s/^/  [$name] /" >>"$LOG"
  return 0
}

lane() {  # lane GPU FUNCTION: run FUNCTION with only that GPU visible, in the background if 2 GPUs
  local gpu=$1 fn=$2
  if [ "$NGPU" -ge 2 ]; then (export CUDA_VISIBLE_DEVICES=$gpu; $fn) & else (export CUDA_VISIBLE_DEVICES=0; $fn); fi
}

# Built-in backends are found through the attn_harness.backends entry points (pyproject.toml),
# which exist only once the checkout is installed; --no-deps keeps the GPU libraries as they are.
[ "${DRY:-0}" = 1 ] || python3 -m pip install -q --no-deps --no-build-isolation -e . >>"$LOG" 2>&1
{ echo "### phase $PHASE on $(hostname) at $(date -u +%FT%TZ), $NGPU GPU(s)"
  nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
  $H list; } >>"$LOG" 2>&1

# Everything a phase runs is listed in ci/gpu/phase-$PHASE.sh: lane0 (timed), lane1 (correctness),
# both (needs every GPU: --devices 0,1, Ray). See that file for what each step proves.
source "ci/gpu/phase-$PHASE.sh"
declare -F both >/dev/null && both
lane 0 lane0
lane 1 lane1
wait

ls -la "$R" >>"$LOG"
tar czf "$OUT/results-$PHASE.tgz" --exclude='*.whl' -C "$R" . 2>>"$LOG"
python3 - "$R" <<'EOF' | tee -a "$LOG"
import collections, json, pathlib, sys
c = collections.Counter()
for f in sorted(pathlib.Path(sys.argv[1]).glob("*/results.jsonl")):
    for line in f.read_text().splitlines():
        try:
            r = json.loads(line)
        except ValueError:
            continue
        c[(f.parent.name, r.get("backend"), r.get("status"))] += 1
for k, n in sorted(c.items()):
    print(*k, n)
EOF
