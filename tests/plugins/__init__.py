"""Backends used by the tests through ``module:Class`` specs (tests/ is on sys.path)."""
