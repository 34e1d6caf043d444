# ci/gpu/conf.sh (issue 12): conformance you can trust, on the H200. ~6-8 min in total.
# Proves: (1) the real GPU backends (FA2/3/4, FlashInfer) pass the conformance grid under the
# per-request rel-L2 gate, incl. the new features-bite / fp8-kv-scales / flashinfer-workspace
# cases (zero false mismatches except the documented FlashInfer e5m2 mask-fill bug);
# (2) every GPU mutant of tests/mutants/gpu.py (FA2/FA3 and FlashInfer wrapped with one bug
# each) is flagged `mismatch`; (3) the FlashInfer workspace batch plans without error.
# Sourced by the session script: uses $H, $R and step.
export PYTHONPATH="tests:${PYTHONPATH:-}"
step 200 conf12-fa $H run suites/conformance.yaml --backends flash-attn --no-time --quiet \
  --case '*dtype=bfloat16*' --case 'fp8*' --case 'features*' --out $R/conf12-fa
step 150 conf12-fi $H run suites/conformance.yaml --backends flashinfer --variant flashinfer.prefill_backend=fa2 \
  --no-time --quiet --case '*dtype=bfloat16*' --case 'fp8*' --case 'features*' --case 'flashinfer-workspace*' \
  --out $R/conf12-fi
step 60 conf12-fi-ws $H run suites/conformance.yaml --backends flashinfer --no-time --quiet \
  --case 'flashinfer-workspace*' --out $R/conf12-fi-ws
step 60 conf12-real $H run suites/conformance-gpu-mutants.yaml --backends flash-attn,flashinfer,torch-math \
  --no-time --quiet --out $R/conf12-real
step 200 conf12-mutants $H run suites/conformance-gpu-mutants.yaml --backends "$(python3 tests/mutants/gpu.py)" \
  --no-time --quiet --out $R/conf12-mutants
step 20 conf12-verdict sh -c "python3 tests/mutants/verdict.py $R/conf12-real $R/conf12-mutants $R/conf12-fa $R/conf12-fi $R/conf12-fi-ws > $R/conf12-verdict.txt 2>&1; cat $R/conf12-verdict.txt"
