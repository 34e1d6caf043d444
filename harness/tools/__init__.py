"""Evidence and diagnostic tools beside the pipeline: evidence plans, env matrix, diagnostics."""
