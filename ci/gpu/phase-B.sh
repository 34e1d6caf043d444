# Phase B of the H200 evidence session (ci/h200_session.sh B), about 9 minutes on a 2-GPU machine.
# lane0 (GPU 0, timed): fidelity against torch.profiler with the cold-L2 probe (issue 15), the
#   orientation cells cold (hot is phase A), the compare gate against a real 1.5x slowdown
#   (issue 13), the cascade cells not reached on 2026-11-29 (issue 15).
# lane1 (GPU 1, correctness only): the GPU mutants and the real backends on their grid, the
#   adversarial suite and the invariants (issue 12), the crash suite (issue 15).
lane0() {
  step 100 fidelity python3 ci/fidelity.py --out $R/fidelity
  step 60 orientation-cold $H run ci/orientation.yaml --timing-mode cold --quiet --out $R/orientation-cold
  # Same FA3 cells through the slowed wrapper, 2 forwards per call vs 3: compare must exit 1
  # (decode-1 vs decode-2 of phase A: exit 0).
  local slow=(run suites/decode.yaml --case 'llama3-8b*' --backends plugins.slowed:SlowedFlashAttn
              --variant slowed-flash-attn.fa_version=3 --max-time 1 --quiet)
  step 90 rows-base env PYTHONPATH=tests:${PYTHONPATH:-} ATTN_HARNESS_SLOW_REPEAT=2 $H "${slow[@]}" --out $R/rows-base
  step 90 rows-slow env PYTHONPATH=tests:${PYTHONPATH:-} ATTN_HARNESS_SLOW_REPEAT=3 $H "${slow[@]}" --out $R/rows-slow
  step 30 rows-compare $H compare $R/rows-base $R/rows-slow --markdown $R/rows-compare.md
  step 120 cascade-rest $H run suites/cascade.yaml --backends flash-attn,flash-attn-cascade,flashinfer,flashinfer-cascade \
    --variant flash-attn.fa_version=3 --max-time 0.5 --quiet --case 'decode-one-block-prefix*' --case 'decode-groups*' \
    --case 'decode-group-size*' --out $R/cascade-rest
}
lane1() {
  export PYTHONPATH="tests:${PYTHONPATH:-}"
  step 60 mutants-real $H run suites/conformance-gpu-mutants.yaml --backends flash-attn,flashinfer,torch-math \
    --no-time --quiet --out $R/mutants-real
  step 150 mutants $H run suites/conformance-gpu-mutants.yaml --backends "$(python3 tests/mutants/gpu.py)" \
    --no-time --quiet --out $R/mutants
  step 20 mutants-verdict sh -c "python3 tests/mutants/verdict.py $R/mutants-real $R/mutants $R/conf-fa $R/conf-fi > $R/mutants-verdict.txt 2>&1; cat $R/mutants-verdict.txt"
  step 80 crash $H run ci/smoke.yaml --backends torch-math,flash-attn,plugins.crashy:DeviceAssertBackend,plugins.crashy:SegfaultBackend,plugins.crashy:HangingBackend,plugins.crashy:RaisingBackend,plugins.crashy:NaNBackend,sdpa \
    --variant flash-attn.fa_version=3 --no-time --cell-timeout 5 --quiet --out $R/crash
  step 120 adversarial $H run suites/conformance-adversarial.yaml --backends flash-attn,flashinfer,torch-math \
    --variant flashinfer.prefill_backend=fa2 --no-time --quiet --out $R/adversarial
  step 90 invariants $H run suites/conformance-gpu-mutants.yaml --backends flash-attn,flashinfer --variant flash-attn.fa_version=3 \
    --variant flashinfer.prefill_backend=fa2 --no-time --invariants --quiet --case 'mixed' --case 'fp8*' --out $R/invariants
  step 20 adv-verdict sh -c "python3 tests/mutants/verdict.py $R/adversarial $R/invariants > $R/adv-verdict.txt 2>&1; cat $R/adv-verdict.txt"
}
