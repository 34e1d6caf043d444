"""Suite YAML -> validated case specs.

A suite is a list of cases; any scalar field of a case may be given as a list, and the lists
of one case expand (cartesian product, or zip with ``sweep: zip``) into named cases. Errors
are raised as ``SpecError`` naming the file, the case and the field.

    loading   the file: size, encoding, YAML (duplicate keys rejected), then parse_suite
    expand    parsed YAML -> Suite: defaults, sweep expansion, validation, error messages
    models    the pydantic models (distributions, RequestGroup, SharedPrefix, CaseSpec, Suite)
    limits    input bounds and the YAML size guard
    errors    SpecError
"""

from harness.spec.errors import SpecError
from harness.spec.expand import expand_case, parse_suite
from harness.spec.limits import (
    MAX_CASES,
    MAX_KV_TOKENS_PER_CASE,
    MAX_REQUESTS,
    MAX_SEED,
    MAX_SUITE_BYTES,
    MAX_TOKENS_PER_REQUEST,
    MAX_YAML_DEPTH,
    MAX_YAML_NODES,
    yaml_size,
)
from harness.spec.loading import load_suite
from harness.spec.suite_model import (
    CaseSpec,
    ContextParallel,
    Dist,
    Explicit,
    Fixed,
    LengthDist,
    LogNormal,
    Normal,
    RequestGroup,
    SharedPrefix,
    Suite,
    Uniform,
    dist_bounds,
)

__all__ = [
    "MAX_CASES", "MAX_KV_TOKENS_PER_CASE", "MAX_REQUESTS", "MAX_SEED", "MAX_SUITE_BYTES", "MAX_TOKENS_PER_REQUEST",
    "MAX_YAML_DEPTH", "MAX_YAML_NODES", "CaseSpec", "ContextParallel", "Dist", "Explicit", "Fixed", "LengthDist",
    "LogNormal", "Normal", "RequestGroup", "SharedPrefix", "SpecError", "Suite", "Uniform", "dist_bounds",
    "expand_case", "load_suite", "parse_suite", "yaml_size",
]
