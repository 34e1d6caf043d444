"""Model shapes: a Hugging Face config.json (or a built-in entry) -> attention cases, one per
kind of layer and tensor-parallel degree.

    config    config.json fields -> layer kinds; tp_slice (vLLM's head sharding)
    catalog   the built-in table (configs/*.json, read by the same parser)
    cases     a suite case's ``model:`` / ``tp:`` -> concrete cases
"""

from harness.spec.models.catalog import builtin, known_models, resolve
from harness.spec.models.config import LayerKind, ModelAttention, ModelError, RankShape, parse_config, read_config, tp_slice

__all__ = ["LayerKind", "ModelAttention", "ModelError", "RankShape", "builtin", "known_models", "parse_config",
           "read_config", "resolve", "tp_slice"]
