"""Workers start without re-running the parent's ``__main__``.

The spawn start method normally re-imports the parent's main script in every child (as
``__mp_main__``). A worker needs harness modules only, and that re-import breaks two ordinary
ways of calling ``harness.cli.main``: a script without an ``if __name__ == "__main__":`` guard
(each child would start the run again, and multiprocessing refuses), and a script fed on
stdin (there is no file to re-run). With ``__main__`` looking like an interactive session
while a worker starts (as in a notebook, where spawn already skips it), the child imports
what its target needs and nothing else; ``sys.path`` and the working directory still travel.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from typing import Iterator

_LOCK = threading.Lock()  # workers may be (re)started from more than one thread
_MISSING = object()


@contextlib.contextmanager
def main_not_reimported() -> Iterator[None]:
    """Hide ``__main__.__file__`` and ``__spec__`` from spawn's preparation data, then restore them."""
    main = sys.modules.get("__main__")
    if main is None:
        yield
        return
    with _LOCK:
        saved = {k: main.__dict__.get(k, _MISSING) for k in ("__file__", "__spec__")}
        main.__dict__.pop("__file__", None)
        main.__spec__ = None
        try:
            yield
        finally:
            for k, v in saved.items():
                if v is _MISSING:
                    main.__dict__.pop(k, None)
                else:
                    main.__dict__[k] = v
