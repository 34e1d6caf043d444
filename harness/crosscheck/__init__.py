"""Re-timing rows with timers this project did not write, and standalone repro scripts."""
