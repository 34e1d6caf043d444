# shard (issue 18): both GPUs; about 2 minutes, limits 70 + 90 + 15 = 175 s in all.
# Proves on the 2-GPU H200 that `--ray` (a local Ray cluster: one long-lived actor per GPU, each
# keeping one isolated worker for all its cases) gives the same verdicts as `--devices 0,1` on
# the same 60 decode cells (llama3-8b x flash-attn 2/3/4 + FlashInfer, --max-time 0.3), and
# prints the speed-up of Ray over --devices and both cell rates (ci/shard_compare.py, run.json's
# run_s, Ray's start-up included). Expected: --devices about 30 s of worker start (the 2026-11-30
# runs: ~28 s of fixed cost per run) + ~15 s of cells; Ray the same + ~10 s (ray.init, actor
# start). `--shard K/N` + `merge` are device-independent (they pick and combine cells/rows) and
# are proven on CPU (tests/test_shard_merge.py), so they take no GPU time here.
# Needs `ray` importable (the coordinator installs the [ray] extra from the devkit); skips with a
# message when fewer than 2 GPUs are visible or ray is missing.
# DRY=1 on a CPU box: the same commands with CPU workers and backends, to check the flags.
SHARD_NGPU=$(python3 -c "import torch; print(torch.cuda.device_count())" 2>/dev/null || echo 0)
if [ "${DRY:-0}" = 1 ] && [ "${SHARD_NGPU:-0}" -lt 2 ]; then
  SHARD_CELLS=(suites/decode.yaml --backends sdpa,torch-math --quiet)
  SHARD_DEVICES=(--devices cpu,cpu); SHARD_RAY=(--device cpu --ray)
else
  SHARD_CELLS=(suites/decode.yaml --case 'llama3-8b*' --backends flash-attn,flashinfer
               --variant flashinfer.prefill_backend=auto --quiet)
  SHARD_DEVICES=(--devices 0,1); SHARD_RAY=(--device cuda --ray)
fi
if [ "${DRY:-0}" != 1 ] && [ "${SHARD_NGPU:-0}" -lt 2 ]; then
  echo "=== SKIP shard: needs 2 visible GPUs, found ${SHARD_NGPU:-0} (CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-unset})" | tee -a "$LOG"
elif ! python3 -c "import ray" 2>/dev/null; then
  echo "=== SKIP shard: ray is not importable here (pip install 'attn-harness[ray]')" | tee -a "$LOG"
else
  step 70 shard-devices $H run "${SHARD_CELLS[@]}" "${SHARD_DEVICES[@]}" --max-time 0.3 --out $R/shard-devices
  step 90 shard-ray $H run "${SHARD_CELLS[@]}" "${SHARD_RAY[@]}" --max-time 0.3 --out $R/shard-ray
  step 15 shard-compare python3 ci/shard_compare.py $R/shard-devices $R/shard-ray
fi
