# ci/gpu/trace.sh (issue 17): replay sampled steps of real serving traces. ~2 min in total.
# Proves: the scheduler-model steps of the Azure conversation trace (6 steps) and the Mooncake
# conversation trace (4 steps) run and pass the reference check on FA2/FA3/FA4 (flash-attn, all
# fa_version variants; block 256 so FA2 runs) and FlashInfer, with timing; cascade backends are
# listed on Mooncake (they report `unsupported` until shared prefixes are carried into the
# generated cases, docs/traces.md). Sourced by the session script: uses $H, $R and step.
step 90 trace-azure-conv $H run suites/trace-azure-conv.yaml --quiet --out $R/trace-azure-conv
step 90 trace-mooncake $H run suites/trace-mooncake.yaml --quiet --out $R/trace-mooncake
