# ci/gpu/evidence.sh (issue 15): the H200 evidence still missing after 2026-11-30. Sourced by the
# session script (uses $H, $R, step); defines evidence_lane0 / evidence_lane1, which
# ci/gpu/phase-E.sh runs side by side: `bash ci/h200_session.sh E` (2-GPU machine, one call,
# about 8 minutes; each lane fits the 560 s phase budget).
#
# evidence_lane0 (GPU 0 alone, TIMED), expected times (limits in the step lines):
#   orientation  ~40 s  ci/orientation.yaml through the harness (direct needs its rows)
#   direct       ~20 s  the same paged calls timed raw beside the harness (agreement, target 5%)
#   callform-diag ~90 s  FA3/FA4/FlashInfer paged decode on three shapes: the adapter in both call
#                       forms vs the plain call, one argument changed a line, with each call's
#                       kernel list (ci/callform_diag.py docstring: how to read it)
#   fidelity    ~150 s  harness vs torch.profiler, gated on the kernels' busy time (overlaps
#                       counted once; sum and span printed beside it), FA + FlashInfer only
#   cascade-sweep ~150 s  the full cascade grid (decode*, mixed*: 49 cases x FA3/FA4 plain and
#                       cascade, FlashInfer plain and cascade), timing only (--no-check,
#                       --max-time 0.1); correctness of the same cells is lane 1's cascade-check
# evidence_lane1 (GPU 1, CORRECTNESS only):
#   gpu-pytest  ~240 s  the whole test suite on 6 pytest-xdist workers (ci/gpu_pytest.sh;
#                       all workers on GPU 1, the GPU-timing tests alone at the end), 0 failed
#   fp8          ~90 s  suites/fp8.yaml: FA3 e4m3 and FlashInfer e4m3/e5m2 (incl. the scaled
#                       e5m2 case) on decode, prefill and extend, beside bf16 (--no-time)
#   cascade-check  rest  the full cascade grid with the reference check (--no-time); rows
#                       beyond the limit: `harness run ... --resume $R/cascade-check`
# Proves: fidelity within 3% for FA3/FA4 with the busy-time comparison, harness vs raw calls
# within 5% (or the causes named by callform-diag), the cascade sweep, fp8 e4m3/e5m2, and the
# GPU test suite log (0 failed) under $R/gpu-pytest/.
CASCADE_BACKENDS=flash-attn,flash-attn-cascade,flashinfer,flashinfer-cascade

evidence_lane0() {
  step 60 orientation $H run ci/orientation.yaml --quiet --out $R/orientation
  step 50 direct python3 ci/direct_timing.py --harness-results $R/orientation --out $R/direct.json
  step 120 callform-diag python3 ci/callform_diag.py --out $R/callform-diag
  step 170 fidelity python3 ci/fidelity.py --out $R/fidelity --backends flash-attn,flashinfer --total-budget 140
  step 160 cascade-sweep $H run suites/cascade.yaml --backends $CASCADE_BACKENDS --case 'decode*' --case 'mixed*' \
    --no-check --max-time 0.1 --quiet --out $R/cascade-sweep
}

evidence_lane1() {
  mkdir -p $R/gpu-pytest
  export WORKERS=6 PYTEST_TIMEOUT=190  # this lane runs in its own subshell: nothing else sees these
  step 280 gpu-pytest bash ci/gpu_pytest.sh $R/gpu-pytest/pytest.log
  step 120 fp8 $H run suites/fp8.yaml --backends flash-attn,flashinfer --variant flash-attn.fa_version=3 \
    --variant flashinfer.prefill_backend=fa2 --no-time --quiet --out $R/fp8
  step 160 cascade-check $H run suites/cascade.yaml --backends $CASCADE_BACKENDS --no-time --quiet --out $R/cascade-check
}
