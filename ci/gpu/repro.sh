# ci/gpu/repro.sh (issue 12, `harness repro`): correctness lane (GPU 1 alone; no timing), < 2 min.
# Proves: `harness repro --shrink` turns the library bugs the H200 grid found into standalone
# scripts (torch + the library only) that still fail outside the harness, and that a passing
# row's script passes:
#   1. FlashInfer fp8 e5m2 (small scales; the finite -5e4 mask fill applied before scaling):
#      reports/h200/2026-11-30/conf-fi, its cell with the fewest heads;
#      expected: the script exits 1.
#   2. FA4 (flash_attn.cute 4.0.0b36, sm90) reading the NaN tail of a request's last page under
#      --adversarial: reports/h200/2026-11-30/adversarial page-sizes[block_size=128]; expected: exit 1.
#   3. FA3 on a passing mixed bf16 cell; expected: exit 0.
# Each script's exit code is logged as "exit N (expected M)" in $R/logs/repro-*-script.log; the
# scripts and the shrink logs stay under $R/repro-*. A script exiting 0 for 1 or 2 means the bug
# did not reproduce on the script's own inputs (same shapes, different bits): read its per-request
# lines. Sourced by the session script: uses $H, $R and step.
export PYTHONPATH="tests:${PYTHONPATH:-}"

step 60 repro-fi-run $H run suites/conformance.yaml --backends flashinfer --no-time --quiet \
  --case 'fp8[num_heads=4,kv_cache_dtype=fp8_e5m2,block_size=16]' \
  --variant flashinfer.decode_tensor_cores=True --variant flashinfer.prefill_backend=fa2 --out $R/repro-fi
step 90 repro-fi-shrink $H repro $R/repro-fi 0 --shrink --max-attempts 16 -o $R/repro-fi/repro.py
step 30 repro-fi-script sh -c "python3 $R/repro-fi/repro.py; echo \"exit \$? (expected 1: FlashInfer e5m2 bug reproduces standalone)\""

step 60 repro-fa4-run $H run suites/conformance-adversarial.yaml --backends flash-attn --no-time --quiet \
  --case 'page-sizes[block_size=128]' --adversarial --variant flash-attn.fa_version=4 --out $R/repro-fa4
step 90 repro-fa4-shrink $H repro $R/repro-fa4 0 --shrink --max-attempts 16 -o $R/repro-fa4/repro.py
step 30 repro-fa4-script sh -c "python3 $R/repro-fa4/repro.py; echo \"exit \$? (expected 1: FA4 reads NaN page tails)\""

step 60 repro-fa3-run $H run suites/conformance.yaml --backends flash-attn --no-time --quiet \
  --case 'mixed[num_heads=4,head_size=64,dtype=bfloat16,block_size=16]' --variant flash-attn.fa_version=3 \
  --out $R/repro-fa3
step 30 repro-fa3-repro $H repro $R/repro-fa3 0 -o $R/repro-fa3/repro.py
step 30 repro-fa3-script sh -c "python3 $R/repro-fa3/repro.py; echo \"exit \$? (expected 0: FA3 passes)\""
