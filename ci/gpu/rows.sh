# ci/gpu/rows.sh: the regression gate on real H200 noise (issue 13, "The gate cries wolf").
# About 3 minutes. Proves on the GPU what tests/test_gate_noise.py proves on the CPU:
#   - two runs of the same code (llama3-8b decode cells, flash-attn FA3 through the
#     plugins.slowed wrapper doing the same 2 forwards per call) compare with exit 0;
#   - the same cells with 3 forwards per call (a real 1.5x slowdown) compare with exit 1;
#   - ci/gate.py runs the slowed cells itself, re-measures the slow rows and still exits 1.
# The wrapper keeps one backend name (slowed-flash-attn) in every run so the rows match; the
# repeat count comes from ATTN_HARNESS_SLOW_REPEAT (tests/plugins/slowed.py).
# Results: $R/rows-base-1, $R/rows-base-2, $R/rows-slow-1.5x, and rows-*.md comparisons.
# Expected in the log: "rows-same rc=0", "rows-slow rc=1", "rows-gate rc=1".
ROWS_RUN=(run suites/decode.yaml --case 'llama3-8b*' --backends plugins.slowed:SlowedFlashAttn
          --variant slowed-flash-attn.fa_version=3 --max-time 1 --quiet)
step 120 rows-base-1 env PYTHONPATH=tests:${PYTHONPATH:-} ATTN_HARNESS_SLOW_REPEAT=2 $H "${ROWS_RUN[@]}" --out $R/rows-base-1
step 120 rows-base-2 env PYTHONPATH=tests:${PYTHONPATH:-} ATTN_HARNESS_SLOW_REPEAT=2 $H "${ROWS_RUN[@]}" --out $R/rows-base-2
step 120 rows-slow-1.5x env PYTHONPATH=tests:${PYTHONPATH:-} ATTN_HARNESS_SLOW_REPEAT=3 $H "${ROWS_RUN[@]}" --out $R/rows-slow-1.5x
step 30 rows-same $H compare $R/rows-base-1 $R/rows-base-2 --markdown $R/rows-same.md
step 30 rows-slow $H compare $R/rows-base-1 $R/rows-slow-1.5x --markdown $R/rows-slow.md
step 150 rows-gate env PYTHONPATH=tests:${PYTHONPATH:-} ATTN_HARNESS_SLOW_REPEAT=3 python3 ci/gate.py \
  --device cuda --max-time 1 --suite suites/decode.yaml --case 'llama3-8b*' --backends plugins.slowed:SlowedFlashAttn \
  --variant slowed-flash-attn.fa_version=3 --baseline $R/rows-base-1 --out $R/rows-gate-new \
  --markdown $R/rows-gate.md --remeasure 1
