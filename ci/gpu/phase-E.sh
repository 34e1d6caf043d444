# Phase E of the H200 evidence session (ci/h200_session.sh E): the issue-15 evidence of
# ci/gpu/evidence.sh (see its top comment for steps, lanes and times), about 8 minutes on a
# 2-GPU machine. lane0 = GPU 0 (timed), lane1 = GPU 1 (correctness and the test suite).
source ci/gpu/evidence.sh
lane0() { evidence_lane0; }
lane1() { evidence_lane1; }
