"""``sdpa`` with one SDPA kernel forced (``torch.nn.attention.sdpa_kernel``): cuDNN (PyTorch's
``SDPBackend.CUDNN_ATTENTION``, reported faster than FA3 on Hopper for shorter sequences), the
memory-efficient kernel, or flash. The same padded batches, masks and gather as ``sdpa``; a
separate backend name so that ``sdpa``'s rows (and the baselines that match them by variant)
keep their empty variant. CUDA only; whether the forced kernel takes a layer is asked of torch
(``torch.backends.cuda.can_use_*``, reasons from its debug warnings) and becomes an
``unsupported`` row with that reason."""

from __future__ import annotations

import torch

from attn_contract import Availability
from backends.sdpa import SDPA_KERNELS, SDPABackend, probe_kernel


class SDPAKernelBackend(SDPABackend):
    name = "sdpa-kernel"
    description = "torch SDPA as `sdpa`, with one SDPA kernel forced (cudnn, efficient, flash); CUDA only"
    variant_axes = {"sdpa_backend": tuple(k for k in SDPA_KERNELS if k != "auto")}

    @classmethod
    def default_variants(cls) -> list[dict]:
        # flash never takes a masked call; it stays selectable (its row says why it is unsupported).
        return [{"sdpa_backend": "cudnn"}, {"sdpa_backend": "efficient"}]

    @classmethod
    def availability(cls, variant=None) -> Availability:
        kernel = (variant or {}).get("sdpa_backend", "cudnn")
        if not torch.cuda.is_available():
            return Availability(False, f"sdpa_backend={kernel} forces a CUDA SDPA kernel; no CUDA device here")
        if kernel == "cudnn" and not torch.backends.cudnn.is_available():
            return Availability(False, "sdpa_backend=cudnn: this torch build has no cuDNN")
        return Availability.ok(torch=torch.__version__, cudnn=str(torch.backends.cudnn.version()))

    @classmethod
    def capabilities(cls, variant=None):
        return super().capabilities({"sdpa_backend": "cudnn", **(variant or {})})

    @classmethod
    def check_support(cls, config, variant, device: str) -> str | None:
        reason = super().check_support(config, variant, device)
        if reason or device != "cuda" or not torch.cuda.is_available():
            return reason
        return probe_kernel(config, (variant or {}).get("sdpa_backend", "cudnn"))

    @classmethod
    def standalone_call(cls, config, variant, call=None) -> str | None:
        return None  # the reproducer's SDPA source lets torch pick the kernel
