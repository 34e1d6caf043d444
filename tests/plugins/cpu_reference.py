"""torch-math as a correctness reference on the CPU too: the same real backend, with its
capabilities declaring role "reference" untimed on cpu (on a GPU torch-math itself does), so
the CPU tests can see what a GPU run does with a reference backend's cells."""

from __future__ import annotations

import dataclasses

from attn_contract import Capabilities
from backends.torch_math import TorchMathBackend


class CpuReferenceMath(TorchMathBackend):
    name = "cpu-reference-math"
    untimed_on = TorchMathBackend.untimed_on | {"cpu"}

    @classmethod
    def capabilities(cls, variant=None) -> Capabilities:
        caps = TorchMathBackend.capabilities(variant)
        return dataclasses.replace(caps, untimed_on=cls.untimed_on)
