# shard (issue 18): about 3 minutes. Proves on the 2-GPU H200 machine that `--ray` (a local Ray
# cluster with two GPU workers, one case at a time per GPU, each in an isolated worker) gives
# the same verdicts as `--devices 0,1` on the same decode cells, and prints the speed-up of Ray
# over --devices (ci/shard_compare.py, from run.json's run_s). Skips with a message when fewer
# than 2 GPUs are visible or ray is not importable. Also one --shard 1/2 + 2/2 + merge check.
NGPU=$(python3 -c "import torch; print(torch.cuda.device_count())" 2>/dev/null || echo 0)
if [ "${NGPU:-0}" -lt 2 ]; then
  echo "=== SKIP shard: needs 2 visible GPUs, found ${NGPU:-0} (CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-unset})"
elif ! python3 -c "import ray" 2>/dev/null; then
  echo "=== SKIP shard: ray is not importable here (pip install 'attn-harness[ray]')"
else
  step 80 shard-devices $H run suites/decode.yaml --device cuda --devices 0,1 --max-time 0.3 --quiet --out $R/shard-devices
  step 90 shard-ray $H run suites/decode.yaml --device cuda --ray --max-time 0.3 --quiet --out $R/shard-ray
  step 15 shard-compare python3 ci/shard_compare.py $R/shard-devices $R/shard-ray
  step 40 shard-s1 $H run suites/decode.yaml --device cuda:0 --no-time --shard 1/2 --quiet --out $R/shard-s1
  step 40 shard-s2 $H run suites/decode.yaml --device cuda:1 --no-time --shard 2/2 --quiet --out $R/shard-s2
  step 15 shard-merge $H merge $R/shard-s1 $R/shard-s2 -o $R/shard-merged --strict
fi
