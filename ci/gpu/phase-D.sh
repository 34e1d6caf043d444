# Phase D of the H200 evidence session (ci/h200_session.sh D): the Ray vs --devices comparison
# (issue 18, ci/gpu/shard.sh) alone, on both GPUs; about 2 minutes (limits 175 s).
both() { source ci/gpu/shard.sh; }
lane0() { :; }
lane1() { :; }
