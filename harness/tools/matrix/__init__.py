"""Library-upgrade checks: ``harness matrix`` (one suite run per isolated environment, compared
side by side) and ``harness bisect`` (the first release of a package where a regression appears).
Environments are built and cached by ``harness.tools.matrix.envs``."""
