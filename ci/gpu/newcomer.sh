# ci/gpu/newcomer.sh (issues 13 and 15): the whole test suite on the H200, ~3-6 min.
# Proves: `python3 -m pytest -q` passes on the GPU machine where torch and the kernel libraries
# come from PYTHONPATH (the three subprocess tests that used to drop PYTHONPATH now keep it),
# and the example backend of docs/adding-a-backend.md passes its conformance subset there too.
# The log is committed evidence: $R/gpu-pytest/pytest.log. Sourced by the session script.
mkdir -p "$R/gpu-pytest"
step 540 gpu-pytest bash ci/gpu_pytest.sh "$R/gpu-pytest/pytest.log"
