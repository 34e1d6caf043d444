"""Measurement diagnostics, one module each (`harness diag NAME [ARGS...]`: harness/cli/commands/diag.py).

Diagnostics answer "why is this figure what it is" on a GPU machine (or, for the run summaries,
from any results folder); they are evidence, not gates. Each module has ``main(argv, prog)`` with
its own flags (`harness diag NAME --help`) and is imported only when its name is given, so the
GPU ones cost nothing elsewhere and say so plainly when no CUDA device is visible.
"""

from __future__ import annotations

# name -> (module under harness.tools.diag, one line for `harness diag --help`)
DIAGNOSTICS: dict[str, tuple[str, str]] = {
    "callform": ("callform", "GPU: the adapter's call vs each library's plain call, one factor a line"),
    "direct": ("direct", "GPU: the orientation cells timed through the raw library calls, beside the harness's rows"),
    "fidelity": ("fidelity", "GPU: the harness's time vs torch.profiler's kernel time, per cell"),
    "decode-minute": ("decode_minute", "the main job twice back to back: wall time, breakdowns, repeatability"),
    "clocks": ("clocks", "GPU: one decode call burst (after idle) vs sustained (after load), with SM clock, power, read cost"),
    "speed": ("speed", "a run's wall time and where it went; with two folders the speed-up and verdict agreement"),
    "interleave": ("interleave", "GPU: interleaved vs sequential sampling, hot and cold L2, in fresh processes; "
                                 "every row within 1%?"),
    "interleave-paired": ("interleave_paired", "GPU: the same with both orders in one process (A B B A), each "
                                               "process's own ratio: a level a process shares cancels"),
}
