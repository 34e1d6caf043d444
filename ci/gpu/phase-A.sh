# Phase A of the H200 evidence session (ci/h200_session.sh A), about 9 minutes on a 2-GPU machine.
# lane0 (GPU 0, timed): the main job twice with default flags (issue 14 wall time, issue 15
#   repeatability), their comparison, the orientation cells and the same paged calls timed
#   directly through the libraries (issue 15).
# lane1 (GPU 1, correctness only): the whole test suite on the GPU (issue 15) and the
#   conformance grid on the real FA and FlashInfer backends under the per-request gate (issue 12).
lane0() {
  step 220 decode-1 $H run suites/decode.yaml --report --quiet --out $R/decode-1
  step 200 decode-2 $H run suites/decode.yaml --quiet --out $R/decode-2
  step 30 decode-compare $H compare $R/decode-1 $R/decode-2 --markdown $R/decode-compare.md
  step 60 orientation $H run ci/orientation.yaml --quiet --out $R/orientation
  step 50 direct python3 ci/direct_timing.py --harness-results $R/orientation --out $R/direct.json
}
lane1() {
  mkdir -p $R/gpu-pytest
  step 280 gpu-pytest bash ci/gpu_pytest.sh $R/gpu-pytest/pytest.log
  step 150 conf-fa $H run suites/conformance.yaml --backends flash-attn,torch-math --no-time --quiet \
    --case '*dtype=bfloat16*' --case 'fp8*' --case 'features*' --case 'alibi*' --out $R/conf-fa
  step 120 conf-fi $H run suites/conformance.yaml --backends flashinfer --variant flashinfer.prefill_backend=fa2,fa3 \
    --no-time --quiet --case '*dtype=bfloat16*' --case 'fp8*' --case 'features*' --case 'flashinfer-workspace*' --out $R/conf-fi
}
