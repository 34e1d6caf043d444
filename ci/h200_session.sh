#!/usr/bin/env bash
# Runs ON THE GPU MACHINE after the devkit is installed (see ../shared/devkit/README.md):
#   source .devkit/bin/env.sh && bash ci/h200_session.sh PHASE
# Each step has its own time limit, so one hang cannot eat the whole device call. Results go
# to $OUT/results.tgz (every results folder) and $OUT/session.log.
set -uo pipefail
PHASE=${1:-shakedown}
OUT=${OUT:-/tmp/out}
R=/tmp/h200-results
mkdir -p "$R" "$OUT"
export FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED=1      # FA4: compile each variant once per machine
export FLASH_ATTENTION_CUTE_DSL_CACHE_DIR=/tmp/fa4-cache
export PYTHONWARNINGS=ignore
export TVM_FFI_DISABLE_TORCH_C_DLPACK=1
H="python3 -m harness.cli"
LOG="$OUT/session.log"
step() {  # step SECONDS NAME COMMAND...
  local limit=$1 name=$2; shift 2
  echo "=== $(date +%T) $name (limit ${limit}s): $*" | tee -a "$LOG"
  local t0=$SECONDS
  timeout --signal=INT --kill-after=20 "$limit" "$@" >>"$LOG" 2>&1
  echo "=== $name rc=$? in $((SECONDS - t0))s" | tee -a "$LOG"
}
# Built-in backends are found through the attn_harness.backends entry points (pyproject.toml),
# which exist only once the checkout is installed; --no-deps keeps the devkit's libraries.
python3 -m pip install -q --no-deps --no-build-isolation -e . >>"$LOG" 2>&1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv >>"$LOG" 2>&1
$H list >>"$LOG" 2>&1

bg() {  # bg SECONDS NAME COMMAND...: like step, in the background (correctness-only runs)
  local limit=$1 name=$2; shift 2
  echo "=== $(date +%T) $name (background, limit ${limit}s): $*" | tee -a "$LOG"
  ( timeout --signal=INT --kill-after=20 "$limit" "$@" >"$R/$name.log" 2>&1; echo "=== $name rc=$?" >>"$LOG" ) &
}
case "$PHASE" in
final-a)
  step 100 orientation $H run ci/orientation.yaml --quiet --out $R/orientation
  step 50 direct python3 ci/direct_timing.py --harness-results $R/orientation --out $R/direct.json
  # Conformance is correctness only (--no-time), so four processes share the GPU to overlap JIT builds.
  bg 200 conf-fa-fp16 $H run suites/conformance.yaml --backends flash-attn,torch-math --no-time --quiet --case '*dtype=float16*' --out $R/conf-fa-fp16
  bg 200 conf-fa-rest $H run suites/conformance.yaml --backends flash-attn,torch-math,sdpa --no-time --quiet --case '*dtype=bfloat16*' --case 'fp8*' --case 'layout-hnd*' --case 'features*' --out $R/conf-fa-rest
  bg 200 conf-fi-fp16 $H run suites/conformance.yaml --backends flashinfer --variant flashinfer.prefill_backend=fa2 --no-time --quiet --case '*dtype=float16*' --out $R/conf-fi-fp16
  bg 200 conf-fi-rest $H run suites/conformance.yaml --backends flashinfer --variant flashinfer.prefill_backend=fa2 --no-time --quiet --case '*dtype=bfloat16*' --case 'fp8*' --case 'layout-hnd*' --case 'features*' --out $R/conf-fi-rest
  wait
  step 60 crash env PYTHONPATH=tests:$PYTHONPATH $H run ci/smoke.yaml --backends torch-math,flash-attn,plugins.crashy:DeviceAssertBackend,plugins.crashy:SegfaultBackend,plugins.crashy:HangingBackend,plugins.crashy:RaisingBackend,plugins.crashy:NaNBackend,sdpa --variant flash-attn.fa_version=3 --no-time --cell-timeout 20 --quiet --out $R/crash
  step 50 cascade-conf $H run suites/cascade.yaml --case 'cpu-*' --backends torch-cascade,flash-attn-cascade,flashinfer-cascade,flash-attn,flashinfer --variant flash-attn.fa_version=3,4 --no-time --quiet --out $R/cascade-conf
  ;;
final-b)
  step 90 decode-1 $H run suites/decode.yaml --case 'llama3-8b*' --backends flash-attn,flashinfer --variant flashinfer.prefill_backend=auto --max-time 1 --quiet --out $R/decode-1
  step 90 decode-2 $H run suites/decode.yaml --case 'llama3-8b*' --backends flash-attn,flashinfer --variant flashinfer.prefill_backend=auto --max-time 1 --quiet --out $R/decode-2
  # Bounded by --total-budget (70 s from start, the default); SIGINT at the limit keeps the rows.
  step 100 fidelity python3 ci/fidelity.py --out $R/fidelity
  ;;
final-c)  # what the 2026-11-29 session could not reach (see reports/h200/2026-11-29/README.md)
  step 60 timing-tests python3 -m pytest -q tests/test_timing.py tests/test_ci_scripts.py -k cuda
  step 90 orientation $H run ci/orientation.yaml --quiet --out $R/orientation
  step 60 direct python3 ci/direct_timing.py --harness-results $R/orientation --out $R/direct.json
  step 100 fidelity python3 ci/fidelity.py --out $R/fidelity
  step 60 fp8-e5m2 $H run suites/conformance.yaml --backends flashinfer,flash-attn,torch-math --no-time --quiet --case 'fp8-e5m2-scaled*' --case 'features*' --case 'alibi*' --out $R/conf-fp8-features
  step 120 cascade-rest $H run suites/cascade.yaml --backends flash-attn,flash-attn-cascade,flashinfer,flashinfer-cascade --variant flash-attn.fa_version=3 --max-time 0.5 --quiet --case 'decode-one-block-prefix*' --case 'decode-groups*' --case 'decode-group-size*' --case 'decode[num_kv_heads=4*' --out $R/cascade-rest
  step 100 crash env PYTHONPATH=tests:$PYTHONPATH $H run ci/smoke.yaml --backends torch-math,flash-attn,plugins.crashy:DeviceAssertBackend,plugins.crashy:SegfaultBackend,plugins.crashy:HangingBackend,plugins.crashy:RaisingBackend,plugins.crashy:NaNBackend,sdpa --variant flash-attn.fa_version=3 --no-time --cell-timeout 5 --quiet --out $R/crash
  ;;
final-d)
  step 200 decode-all-1 $H run suites/decode.yaml --backends flash-attn,flashinfer --variant flashinfer.prefill_backend=auto --max-time 1 --quiet --out $R/decode-all-1
  step 200 decode-all-2 $H run suites/decode.yaml --backends flash-attn,flashinfer --variant flashinfer.prefill_backend=auto --max-time 1 --quiet --out $R/decode-all-2
  step 150 page-prefill $H run suites/page_sizes.yaml --backends flashinfer,flash-attn --case 'prefill-*' --case 'extend-*' --case 'mixed-*' --max-time 0.5 --quiet --out $R/page-prefill
  ;;
*)
  echo "unknown phase $PHASE" | tee -a "$LOG"
  ;;
esac
# Bring compiled JIT kernels back so a later session need not compile them again.
tar cJf "$OUT/jitcache-$PHASE.tar.xz" -C / tmp/flashinfer-ws tmp/fa4-cache 2>/dev/null
ls -la "$OUT" >>"$LOG"
tar czf "$OUT/results.tgz" -C "$R" . 2>>"$LOG"
grep -h '"status"' $R/*/results.jsonl 2>/dev/null | python3 -c '
import sys, json, collections
c = collections.Counter()
for line in sys.stdin:
    r = json.loads(line); c[(r["suite"], r["backend"], r["status"])] += 1
for k, n in sorted(c.items()): print(*k, n)' | tee -a "$LOG"
