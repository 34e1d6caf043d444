# speed (issue 14), lane: both GPUs (source it inside phase C's `both`, GPU 0 and 1 visible);
# the 1-GPU run uses cuda:0 alone. About 2.5 + 2 min on a 2-GPU H200 machine (1 GPU: 2.5 min).
# Proves: the main job `harness run suites/decode.yaml` with default flags, checks included,
# end to end (run.json wall_s, target < 180 s; wall_breakdown_s and workers say where the time
# went outside the rows: startup, expand, wait_workers, cases, finish; per worker ready/import/
# busy/idle), every row's breakdown, torch-math checked but not timed (timing_skipped), NVML
# energy from the timing loop (timing.energy.method); then `--devices 0,1` from the shared case
# queue (speed-up, target >= 1.85x; identical verdicts) and ci/speed_summary.py over both.
# Uses $H, $R, step (ci/h200_session.sh); DRY=1 checks the flags on a CPU machine.
t0=$SECONDS
step 300 speed-decode-1gpu $H run suites/decode.yaml --device cuda:0 --report --quiet --out $R/speed-decode-1gpu
echo "=== speed-decode-1gpu: shell wall $((SECONDS - t0)) s" | tee -a "$LOG"
if [ "${NGPU:-1}" -ge 2 ]; then
  t0=$SECONDS
  step 240 speed-decode-2gpu $H run suites/decode.yaml --devices 0,1 --report --quiet --out $R/speed-decode-2gpu
  echo "=== speed-decode-2gpu: shell wall $((SECONDS - t0)) s" | tee -a "$LOG"
  step 60 speed-summary python3 ci/speed_summary.py $R/speed-decode-1gpu $R/speed-decode-2gpu --json $R/speed-summary.json
else
  step 60 speed-summary python3 ci/speed_summary.py $R/speed-decode-1gpu --json $R/speed-summary.json
fi
