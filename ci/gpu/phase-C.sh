# Phase C of the H200 evidence session (ci/h200_session.sh C), about 5 minutes, if device time is left.
# lane0 (GPU 0, timed): the cascade cells not reached on 2026-11-29 (one-block prefix, group
#   size 1, multi-group decode) and the prefill/extend/mixed page-size sweep (issue 15).
# lane1 (GPU 1): trace replay (issue 17), when ci/gpu/trace.sh exists.
lane0() {
  step 120 cascade-rest $H run suites/cascade.yaml --backends flash-attn,flash-attn-cascade,flashinfer,flashinfer-cascade \
    --variant flash-attn.fa_version=3 --max-time 0.5 --quiet --case 'decode-one-block-prefix*' --case 'decode-groups*' \
    --case 'decode-group-size*' --out $R/cascade-rest
  step 150 page-prefill $H run suites/page_sizes.yaml --backends flashinfer,flash-attn --case 'prefill-*' \
    --case 'extend-*' --case 'mixed-*' --max-time 0.5 --quiet --out $R/page-prefill
}
lane1() {
  if [ -f ci/gpu/trace.sh ]; then source ci/gpu/trace.sh; else echo "no ci/gpu/trace.sh" | tee -a "$LOG"; fi
}
