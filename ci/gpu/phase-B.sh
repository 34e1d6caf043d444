# Phase B of the H200 evidence session (ci/h200_session.sh B), about 9 minutes on a 2-GPU machine.
# both (every GPU): the main job over two GPUs with cost-balanced cases (issue 14/15), and the
#   same cells through a local Ray cluster of two GPU workers (issue 18) when Ray is importable.
# lane0 (GPU 0, timed): fidelity against torch.profiler and the cold-L2 probe (issue 15), the
#   orientation cells cold vs hot, the compare gate against a real 1.5x slowdown.
# lane1 (GPU 1, correctness only): the GPU mutants and the real backends on their grid
#   (issue 12), the crash suite (issue 15).
both() {
  if [ "$NGPU" -ge 2 ]; then
    step 170 decode-2gpu $H run suites/decode.yaml --devices 0,1 --quiet --out $R/decode-2gpu
    step 30 speed-summary python3 ci/speed_summary.py $R/decode-1 $R/decode-2gpu --json $R/speed-summary.json
    [ -f ci/gpu/shard.sh ] && source ci/gpu/shard.sh
  fi
}
lane0() {
  step 100 fidelity python3 ci/fidelity.py --out $R/fidelity
  step 60 orientation-cold $H run ci/orientation.yaml --timing-mode cold --quiet --out $R/orientation-cold
  # The gate on real H200 noise: the same FA3 cells through the slowed wrapper, 2 forwards per
  # call vs 3 (a real 1.5x slowdown): compare must exit 1 (decode-1 vs decode-2 above: exit 0).
  local slow=(run suites/decode.yaml --case 'llama3-8b*' --backends plugins.slowed:SlowedFlashAttn
              --variant slowed-flash-attn.fa_version=3 --max-time 1 --quiet)
  step 90 rows-base env PYTHONPATH=tests:${PYTHONPATH:-} ATTN_HARNESS_SLOW_REPEAT=2 $H "${slow[@]}" --out $R/rows-base
  step 90 rows-slow env PYTHONPATH=tests:${PYTHONPATH:-} ATTN_HARNESS_SLOW_REPEAT=3 $H "${slow[@]}" --out $R/rows-slow
  step 30 rows-compare $H compare $R/rows-base $R/rows-slow --markdown $R/rows-compare.md
}
lane1() {
  export PYTHONPATH="tests:${PYTHONPATH:-}"
  step 60 mutants-real $H run suites/conformance-gpu-mutants.yaml --backends flash-attn,flashinfer,torch-math \
    --no-time --quiet --out $R/mutants-real
  step 150 mutants $H run suites/conformance-gpu-mutants.yaml --backends "$(python3 tests/mutants/gpu.py)" \
    --no-time --quiet --out $R/mutants
  step 20 mutants-verdict sh -c "python3 tests/mutants/verdict.py $R/mutants-real $R/mutants $R/conf-fa $R/conf-fi > $R/mutants-verdict.txt 2>&1; cat $R/mutants-verdict.txt"
  step 90 crash $H run ci/smoke.yaml --backends torch-math,flash-attn,plugins.crashy:DeviceAssertBackend,plugins.crashy:SegfaultBackend,plugins.crashy:HangingBackend,plugins.crashy:RaisingBackend,plugins.crashy:NaNBackend,sdpa \
    --variant flash-attn.fa_version=3 --no-time --cell-timeout 5 --quiet --out $R/crash
}
