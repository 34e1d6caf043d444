"""Readers that decide from records: compare, gate, recommend, per-model answers."""
