# shard (issue 18): about 2 minutes. Proves on the 2-GPU H200 machine that `--ray` (a local Ray
# cluster with two GPU workers, one case at a time per GPU, each in an isolated worker) gives
# the same verdicts as `--devices 0,1` on the same decode cells (the 60 llama3-8b cells, about
# 30 s on one GPU at --max-time 1), and prints the speed-up of Ray over --devices
# (ci/shard_compare.py, from run.json's run_s). Then --shard 1/2 and 2/2 on one GPU each, merged
# with --strict. Skips with a message when fewer than 2 GPUs are visible or ray is not importable.
SHARD_CELLS=(suites/decode.yaml --case 'llama3-8b*' --backends flash-attn,flashinfer
             --variant flashinfer.prefill_backend=auto --quiet)
SHARD_NGPU=$(python3 -c "import torch; print(torch.cuda.device_count())" 2>/dev/null || echo 0)
if [ "${SHARD_NGPU:-0}" -lt 2 ]; then
  echo "=== SKIP shard: needs 2 visible GPUs, found ${SHARD_NGPU:-0} (CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-unset})" | tee -a "$LOG"
elif ! python3 -c "import ray" 2>/dev/null; then
  echo "=== SKIP shard: ray is not importable here (pip install 'attn-harness[ray]')" | tee -a "$LOG"
else
  step 60 shard-devices $H run "${SHARD_CELLS[@]}" --devices 0,1 --max-time 0.3 --out $R/shard-devices
  step 75 shard-ray $H run "${SHARD_CELLS[@]}" --device cuda --ray --max-time 0.3 --out $R/shard-ray
  step 15 shard-compare python3 ci/shard_compare.py $R/shard-devices $R/shard-ray
  step 30 shard-s1 $H run "${SHARD_CELLS[@]}" --device cuda:0 --no-time --shard 1/2 --out $R/shard-s1
  step 30 shard-s2 $H run "${SHARD_CELLS[@]}" --device cuda:1 --no-time --shard 2/2 --out $R/shard-s2
  step 15 shard-merge $H merge $R/shard-s1 $R/shard-s2 -o $R/shard-merged --strict
fi
