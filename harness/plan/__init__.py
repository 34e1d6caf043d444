"""Suite -> cells: what a run selects, what fits in memory, which slice, what is left to run."""
