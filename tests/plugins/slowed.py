"""A backend that really does more work: it wraps a built-in backend and runs every forward
``ATTN_HARNESS_SLOW_REPEAT`` times (default 1: exactly the wrapped backend).

The regression-gate tests run the same plugin with repeat 1 or 2 as the baseline and 2 or 3
as the "new" code, so the rows keep one name (they match) while the new run does 2x or 1.5x
the work of the baseline: a genuine slowdown measured by the real timing loop, not a number
edited into a file.

Use: ``ATTN_HARNESS_SLOW_REPEAT=2 harness run SUITE --backends plugins.slowed:SlowedTorchMath``
with tests/ on PYTHONPATH (``plugins.slowed:SlowedFlashAttn`` on a GPU)."""

from __future__ import annotations

import os
from typing import Any

from attn_contract import AttentionBackend, AttentionImpl
from backends.torch_math import TorchMathBackend

REPEAT_ENV = "ATTN_HARNESS_SLOW_REPEAT"


def repeat_count() -> int:
    raw = os.environ.get(REPEAT_ENV, "1")
    try:
        n = int(raw)
    except ValueError:
        raise ValueError(f"{REPEAT_ENV}={raw!r}: expected a whole number >= 1") from None
    if n < 1:
        raise ValueError(f"{REPEAT_ENV}={raw!r}: expected a whole number >= 1")
    return n


class _RepeatForward:
    """Mixin for an impl: every forward runs ``repeat`` times (the last one's result counts)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.repeat = repeat_count()  # read in the worker process that runs the cell

    def forward(self, query, key, value, kv_cache, metadata, out, lse_out=None):
        for _ in range(self.repeat - 1):
            super().forward(query, key, value, kv_cache, metadata, out, lse_out)
        return super().forward(query, key, value, kv_cache, metadata, out, lse_out)

    def describe_call(self, metadata: Any) -> dict[str, Any]:
        return {**super().describe_call(metadata), "slow_repeat": self.repeat}


def _flash_attn() -> type[AttentionBackend]:
    from backends import flash_attn

    # The backend class named "flash-attn", whatever the module calls it.
    for obj in vars(flash_attn).values():
        if isinstance(obj, type) and issubclass(obj, AttentionBackend) and getattr(obj, "name", None) == "flash-attn":
            return obj
    raise ImportError("backends.flash_attn defines no backend named flash-attn")


# Module-level classes: cells (and their backend classes) are pickled to the worker processes.
class SlowedMathImpl(_RepeatForward, TorchMathBackend.get_impl_cls()):  # type: ignore[misc]
    pass


class SlowedTorchMath(TorchMathBackend):
    name = "slowed-torch-math"
    description = f"torch-math with every forward run ${REPEAT_ENV} times (regression-gate tests)"

    @classmethod
    def get_impl_cls(cls) -> type[AttentionImpl]:
        return SlowedMathImpl


_FlashAttn = _flash_attn()


class SlowedFlashAttnImpl(_RepeatForward, _FlashAttn.get_impl_cls()):  # type: ignore[misc]
    pass


class SlowedFlashAttn(_FlashAttn):  # type: ignore[misc, valid-type]
    name = "slowed-flash-attn"
    description = f"flash-attn with every forward run ${REPEAT_ENV} times (regression-gate tests)"

    @classmethod
    def get_impl_cls(cls) -> type[AttentionImpl]:
        return SlowedFlashAttnImpl
