# Phase F (H200 session of 2026-11-30, evening): the main job and the GPU test suite, one call,
# about 8 minutes on a 2-GPU machine.
# lane0 (GPU 0 alone, timed): `harness run suites/decode.yaml` with default flags twice (issue 14
#   wall time and breakdown, issue 15 repeatability) and `harness compare` of the two.
# lane1 (GPU 1, correctness): the whole test suite as parallel pytest shards (issue 15), then
#   `harness repro --shrink` of the library bugs found on the H200 (issue 12, ci/gpu/repro.sh).
# OMP_NUM_THREADS caps the CPU threads of lane 1's processes so the timed lane's host side is
# not starved by 6 pytest shards each using every core.
lane0() {
  step 300 decode-1 $H run suites/decode.yaml --device cuda:0 --report --quiet --out $R/decode-1
  step 240 decode-2 $H run suites/decode.yaml --device cuda:0 --quiet --out $R/decode-2
  step 30 decode-compare $H compare $R/decode-1 $R/decode-2 --markdown $R/decode-compare.md
}
lane1() {
  export OMP_NUM_THREADS=4 MKL_NUM_THREADS=4 WORKERS=6 PYTEST_TIMEOUT=220
  mkdir -p $R/gpu-pytest
  step 280 gpu-pytest bash ci/gpu_pytest.sh $R/gpu-pytest/pytest.log
  source ci/gpu/repro.sh
}
