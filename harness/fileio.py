"""Atomic file writes: a reader (or a crash) never sees half a file.

Every output the harness writes (rows, run.json, reports, caches, the suite copy) goes through
here: the text is written to a temporary file beside the target and renamed over it, which is
atomic on one filesystem. The temporary name carries the process id so that two processes
writing the same target (a shared roofline cache) never write into one temporary file.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def _tmp_for(path: Path) -> Path:
    return path.with_name(f"{path.name}.tmp{os.getpid()}")


def _replace(tmp: Path, path: Path) -> None:
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | Path, text: str, *, mkdir: bool = True) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically; the parent folder is made unless ``mkdir=False``."""
    path = Path(path)
    if mkdir:
        path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _tmp_for(path)
    try:
        tmp.write_text(text, encoding="utf-8")
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _replace(tmp, path)
    return path


def atomic_copy(src: str | Path, dst: str | Path) -> Path:
    """Copy ``src`` to ``dst`` whole, then rename: ``dst`` is never half a file."""
    dst = Path(dst)
    tmp = _tmp_for(dst)
    try:
        shutil.copyfile(src, tmp)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _replace(tmp, dst)
    return dst
