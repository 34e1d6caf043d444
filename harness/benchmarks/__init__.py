"""pytest-benchmark tests shipped with the package: `pytest --bench-suite SUITE.yaml` collects
``test_suite_bench.py`` from here (harness/pytest_plugin.py), also after a plain pip install."""
