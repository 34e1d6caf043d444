"""What harness run prints at the end: tables and the per-model verdict."""
