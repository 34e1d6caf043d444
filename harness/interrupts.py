"""Ctrl-C and SIGTERM while a command runs.

The handlers raise as Python's default handler does (``KeyboardInterrupt``; ``Terminated`` for
SIGTERM) and also remember the signal. A KeyboardInterrupt raised while a library's native code
calls back into Python (torch's import is the case seen: a Ctrl-C 1.5 s into ``harness run`` on
the CI box) can be swallowed there; the run then went on to the end and exited 0. ``check()``,
called at the run loop's safe points, raises a remembered signal again.

``exit_code(rc)`` is for the process entry points: once an interrupt has been handled, CPython
may still end the process by re-raising SIGINT (exit -2 instead of 130) when the
KeyboardInterrupt passed through one of its code-running C paths on its way up, so the entry
points leave with ``os._exit`` after flushing.
"""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType

_received: int | None = None
_handled = False


class Terminated(KeyboardInterrupt):
    """SIGTERM (kill, a job scheduler): unwinds like Ctrl-C, so workers stop and the resume
    command is printed; exit 143."""


def _raise_for(signum: int) -> None:
    raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


def _on_signal(signum: int, frame: FrameType | None) -> None:
    global _received
    _received = signum
    _raise_for(signum)


def install(sigterm: bool) -> None:
    """Take SIGINT (and SIGTERM when ``sigterm``) for this command. Main thread only."""
    global _received, _handled
    _received, _handled = None, False
    signal.signal(signal.SIGINT, _on_signal)
    if sigterm:
        signal.signal(signal.SIGTERM, _on_signal)


def check() -> None:
    """Raise the interrupt again if one arrived and its exception did not get here (a safe point:
    nothing half-written depends on the caller)."""
    global _received
    if _received is not None:
        signum, _received = _received, None
        _raise_for(signum)


def pending() -> int | None:
    """The signal that arrived and was not handled yet, or None. An exception other than
    KeyboardInterrupt raised after one (an import the interrupt cut short fails on its retry:
    numpy's "cannot load module more than once per process" under torch's import) is the
    interrupt's consequence, not an error of the command."""
    return _received


def handled() -> None:
    """The command caught the interrupt and is about to return its exit code."""
    global _received, _handled
    _received, _handled = None, True


def exit_code(rc: int) -> int:
    """``rc`` for ``sys.exit``; after a handled interrupt, the process ends here with ``rc``."""
    if not _handled:
        return rc
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(rc)
