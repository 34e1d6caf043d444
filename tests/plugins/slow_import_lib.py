"""The "library" of plugins/slow_import.py's backend: importing it waits for the test's gate."""

from plugins.slow_import import wait_for_gate

wait_for_gate()
