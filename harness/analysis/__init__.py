"""Readers that decide from records: compare (the gate's verdict too), recommend, per-model answers."""
