"""Placing a run's cases on workers: in-process, worker processes, a Ray cluster."""
