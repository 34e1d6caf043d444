# contract (issue 11): attn_contract package, backends/flash_attn split into FA2/FA3/FA4
# classes + selector, cascade rule recorded by the runner. About 8 min at most (each step has
# its limit; FA4 JIT is most of it). Proves on the H200 that the split changed nothing:
# - every FA generation and auto still pass conformance against the reference on the decode,
#   mixed, fp8 and feature cases (rows' call.kernel/window_size/scheduler_metadata as before);
# - flash-attn-cascade FA3/FA4 still pass, and their rows carry rule_says_cascade, rule_reason,
#   rule_costs (now added by the runner) and compare_with;
# - the FA/cascade/layering/registry unit tests pass with the real libraries importable
#   (limits detected from the installed builds instead of the documented tables).
step 240 contract-fa-conf $H run suites/conformance.yaml --backends flash-attn,torch-math \
  --variant flash-attn.fa_version=2,3,4,auto --no-time --quiet \
  --case 'decode*' --case 'mixed*' --case 'fp8*' --case 'features*' --out $R/contract-fa-conf
step 150 contract-cascade $H run suites/cascade.yaml --backends flash-attn-cascade,torch-cascade \
  --no-time --quiet --out $R/contract-cascade
step 90 contract-pytest python3 -m pytest -q tests/test_flash_attn_backend.py tests/test_cascade.py \
  tests/test_layering.py tests/test_registry.py
