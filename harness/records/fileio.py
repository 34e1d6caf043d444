"""Atomic file writes: a reader (or a crash) never sees half a file.

Every output the harness writes (rows, run.json, reports, caches, the suite copy) goes through
here: the text is written to a temporary file beside the target and renamed over it, which is
atomic on one filesystem. The temporary name carries the process id so that two processes
writing the same target (a shared roofline cache) never write into one temporary file.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def _tmp_for(path: Path) -> Path:
    return path.with_name(f"{path.name}.tmp{os.getpid()}")


@contextmanager
def atomic_path(path: str | Path, *, mkdir: bool = True) -> Iterator[Path]:
    """A temporary path beside ``path`` for a writer that wants a file name (pandas, tarfile):
    renamed over ``path`` when the block ends, removed if it raises."""
    path = Path(path)
    if mkdir:
        path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _tmp_for(path)
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | Path, text: str, *, mkdir: bool = True) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically; the parent folder is made unless ``mkdir=False``."""
    with atomic_path(path, mkdir=mkdir) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


def atomic_copy(src: str | Path, dst: str | Path) -> Path:
    """Copy ``src`` to ``dst`` whole, then rename: ``dst`` is never half a file."""
    with atomic_path(dst, mkdir=False) as tmp:
        shutil.copyfile(src, tmp)
    return Path(dst)
