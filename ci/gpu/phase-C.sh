# Phase C of the H200 evidence session (ci/h200_session.sh C), what device time is left.
# both (every GPU): the main job over two GPUs with cost-balanced cases, beside phase A's one-GPU
#   run (issues 14/15), and the Ray comparison (issue 18) when ci/gpu/shard.sh exists.
# lane0 (GPU 0, timed): the prefill/extend/mixed page-size sweep (issue 15).
# lane1 (GPU 1): trace replay (issue 17) when ci/gpu/trace.sh exists.
both() {
  if [ "$NGPU" -ge 2 ]; then
    step 170 decode-2gpu $H run suites/decode.yaml --devices 0,1 --quiet --out $R/decode-2gpu
    step 30 speed-summary python3 ci/speed_summary.py $R/decode-1 $R/decode-2gpu --json $R/speed-summary.json
    if [ -f ci/gpu/shard.sh ]; then source ci/gpu/shard.sh; fi
  fi
}
lane0() {
  step 150 page-prefill $H run suites/page_sizes.yaml --backends flashinfer,flash-attn --case 'prefill-*' \
    --case 'extend-*' --case 'mixed-*' --max-time 0.5 --quiet --out $R/page-prefill
}
lane1() {
  if [ -f ci/gpu/trace.sh ]; then source ci/gpu/trace.sh; else echo "no ci/gpu/trace.sh" | tee -a "$LOG"; fi
}
