# speed (issue 14): about 4 min on one H200 (+ about 2 min when 2 GPUs are visible).
# Proves: the main job `harness run suites/decode.yaml --report` with default flags, checks
# included, end to end (run.json wall_s; target < 180 s), every row's time breakdown and NVML
# energy; on 2 GPUs the cost-balanced `--devices 0,1` split: speed-up (target >= 1.85x) and
# identical verdicts. Sourced by the session script: uses $H, $R, step.
t0=$SECONDS
step 480 speed-decode-1gpu $H run suites/decode.yaml --report --quiet --out $R/speed-decode-1gpu
echo "=== speed-decode-1gpu: shell wall $((SECONDS - t0)) s" | tee -a "$LOG"
if [ "$(python3 -c 'import torch; print(torch.cuda.device_count())')" -ge 2 ]; then
  step 300 speed-decode-2gpu $H run suites/decode.yaml --devices 0,1 --quiet --out $R/speed-decode-2gpu
  step 60 speed-summary python3 ci/speed_summary.py $R/speed-decode-1gpu $R/speed-decode-2gpu --json $R/speed-summary.json
else
  step 60 speed-summary python3 ci/speed_summary.py $R/speed-decode-1gpu --json $R/speed-summary.json
fi
