# core (issue 11): about 4 minutes. Proves on the GPU that the refactors changed nothing there:
# - the CUDA timing tests (graph vs eager, verified cold L2, replay check, capture fallback) run
#   against the harness/timing/ package and prepare_cell's own tests;
# - the same decode cells under each stopping criterion: rows record timing.stop_criterion,
#   `samples` takes exactly --max-samples, `time` spends the whole --max-time;
# - ci/fidelity.py, which now builds its cells with runner.prepare_cell, on the smoke suite's
#   decode cases (harness time vs the profiler's kernel sum).
step 240 core-timing-tests python3 -m pytest -q tests/test_timing.py tests/test_prepare_cell.py tests/test_layout.py
step 90 core-stop-noise $H run ci/smoke.yaml --case 'decode-*' --backends flash-attn,flashinfer --quiet --out $R/core-stop-noise
step 90 core-stop-samples $H run ci/smoke.yaml --case 'decode-*' --backends flash-attn,flashinfer --stop samples --max-samples 50 --quiet --out $R/core-stop-samples
step 90 core-stop-time $H run ci/smoke.yaml --case 'decode-*' --backends flash-attn,flashinfer --stop time --max-time 0.5 --quiet --out $R/core-stop-time
step 120 core-fidelity python3 ci/fidelity.py --suite ci/smoke.yaml --case 'decode-*' --backends flash-attn,flashinfer --total-budget 60 --out $R/core-fidelity
