# Phase G (H200 session of 2026-11-30, evening), about 7 minutes on the 2-GPU machine with Ray.
# both (GPUs 0 and 1): the main job over two GPUs from the shared case queue beside phase F's
#   one-GPU run (issue 14: speed-up, identical verdicts), then `--ray` vs `--devices 0,1`
#   (issue 18, ci/gpu/shard.sh).
# lane0 (GPU 0 alone, timed): fidelity against torch.profiler on the kernels' busy time (issue 15).
# lane1 (GPU 1, correctness): fp8 e4m3/e5m2 on decode/extend/prefill (issue 15), the ALiBi cells
#   under the declared FA2 LSE convention, the split-KV and cascade-vs-plain invariants (issue 12).
both() {
  if [ "$NGPU" -ge 2 ]; then
    step 240 decode-2gpu $H run suites/decode.yaml --devices 0,1 --report --quiet --out $R/decode-2gpu
    step 60 speed-summary python3 ci/speed_summary.py $R/decode-1 $R/decode-2gpu --json $R/speed-summary.json
    source ci/gpu/shard.sh
  fi
}
lane0() {
  step 170 fidelity python3 ci/fidelity.py --out $R/fidelity --backends flash-attn,flashinfer --total-budget 140
}
lane1() {
  step 120 fp8 $H run suites/fp8.yaml --backends flash-attn,flashinfer --variant flash-attn.fa_version=3 \
    --variant flashinfer.prefill_backend=fa2 --no-time --quiet --out $R/fp8
  step 90 conf-alibi $H run suites/conformance.yaml --backends flash-attn,flashinfer,torch-math --case 'alibi*' \
    --no-time --quiet --out $R/conf-alibi
  step 60 inv-split $H run suites/conformance-gpu-mutants.yaml --backends flash-attn,flashinfer --variant flash-attn.fa_version=3 \
    --variant flashinfer.prefill_backend=fa2 --no-time --invariants --quiet --case 'mixed' --out $R/inv-split
  step 60 inv-cascade $H run suites/cascade.yaml --backends flashinfer-cascade,flash-attn-cascade --case 'cpu-mixed*length=256*' \
    --variant flash-attn-cascade.fa_version=3 --no-time --invariants --quiet --out $R/inv-cascade
}
