# Phase H (H200 session of 2026-11-30, evening), what device time is left (about 8 minutes).
# lane0 (GPU 0 alone, timed): orientation + the same calls timed raw (issue 15 agreement), the
#   FA4/FA3 adapter-vs-raw diagnostic, trace replay with the report (issue 17), the full
#   cascade sweep timed (issue 15).
# lane1 (GPU 1, correctness): the GPU mutants and the real backends on their grid after this
#   session's check changes (issue 12), then the cascade grid with the reference check.
source ci/gpu/evidence.sh
lane0() {
  step 60 orientation $H run ci/orientation.yaml --quiet --out $R/orientation
  step 50 direct python3 ci/direct_timing.py --harness-results $R/orientation --out $R/direct.json
  step 120 callform-diag python3 ci/callform_diag.py --out $R/callform-diag
  source ci/gpu/trace.sh
  step 160 cascade-sweep $H run suites/cascade.yaml --backends $CASCADE_BACKENDS --case 'decode*' --case 'mixed*' \
    --no-check --max-time 0.1 --quiet --out $R/cascade-sweep
}
lane1() {
  export PYTHONPATH="tests:${PYTHONPATH:-}"
  step 60 mutants-real $H run suites/conformance-gpu-mutants.yaml --backends flash-attn,flashinfer,torch-math \
    --no-time --quiet --out $R/mutants-real
  step 150 mutants $H run suites/conformance-gpu-mutants.yaml --backends "$(python3 tests/mutants/gpu.py)" \
    --no-time --quiet --out $R/mutants
  step 20 mutants-verdict sh -c "python3 tests/mutants/verdict.py $R/mutants-real $R/mutants > $R/mutants-verdict.txt 2>&1; cat $R/mutants-verdict.txt"
  step 200 cascade-check $H run suites/cascade.yaml --backends $CASCADE_BACKENDS --no-time --quiet --out $R/cascade-check
}
