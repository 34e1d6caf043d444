# ci/gpu/trace.sh (issue 17): replay sampled steps of real serving traces. Lane: timed (GPU 0
# alone: it times). ~2 min in total, < 3 min.
# Proves: the scheduler-model steps of the Azure conversation trace (6 steps, mixed and
# decode-only) and the Mooncake conversation trace (4 steps, with shared prefix-cache pages)
# run and pass the reference check on FA2/FA3/FA4 (flash-attn, every fa_version; block 256 so
# FA2 runs) and FlashInfer, and on Mooncake also the cascade backends (torch-cascade,
# flash-attn-cascade FA3/FA4, flashinfer-cascade) on the steps whose requests share pages; with
# timing, and --report writes report.html with the trace section (step-time p50/p90/p99, us per
# generated / prompt token, the trace's winner). Sourced by the session script: uses $H, $R, step.
step 90 trace-azure-conv $H run suites/trace-azure-conv.yaml --quiet --report --out $R/trace-azure-conv
step 90 trace-mooncake $H run suites/trace-mooncake.yaml --quiet --report --out $R/trace-mooncake
