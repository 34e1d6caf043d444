# Phase I (H200 session of 2026-11-30, evening, last call): phase F's two decode runs shared the
# host with 6 pytest shards (lane 1), which moved the eager sdpa rows by up to 30%; here the main
# job runs twice with nothing else on the machine (wall time, repeatability), then fidelity alone
# on GPU 0 beside the test suite again on GPU 1 (with the allocator diagnostic for the one
# memory-estimate failure first).
both() {
  step 200 decode-a $H run suites/decode.yaml --device cuda:0 --report --quiet --out $R/decode-a
  step 200 decode-b $H run suites/decode.yaml --device cuda:0 --quiet --out $R/decode-b
  step 30 decode-ab-compare $H compare $R/decode-a $R/decode-b --markdown $R/decode-ab-compare.md
}
lane0() {
  step 170 fidelity-alone python3 ci/fidelity.py --out $R/fidelity-alone --backends flash-attn,flashinfer --total-budget 140
}
lane1() {
  step 60 mem-diag python3 ci/mem_diag.py flashinfer
  export OMP_NUM_THREADS=4 MKL_NUM_THREADS=4 WORKERS=6 PYTEST_TIMEOUT=200
  mkdir -p $R/gpu-pytest
  step 240 gpu-pytest bash ci/gpu_pytest.sh $R/gpu-pytest/pytest.log
}
