"""The FlashInfer backend's library call as standalone source (``AttentionBackend.standalone_call``,
names agreed with harness/crosscheck/repro.py): what its builder plans and its impl runs, per call form.
The source lives in standalone_call.py.tmpl (a string.Template), so it reads as Python."""

from __future__ import annotations

from importlib.resources import files
from string import Template


def standalone_source(workspace_mib: int, tensor_cores: bool, prefill_backend: str, call_form: str) -> str:
    """Paged decode + paged prefill wrappers on one workspace (a pure-decode batch on a
    ``use_cuda_graph=True`` decode wrapper, as the builder plans it); ``call_form`` fastest sends a
    batch that mixes decodes and prefills through the prefill wrapper alone, in one run()."""
    text = files(__package__).joinpath("standalone_call.py.tmpl").read_text(encoding="utf-8")
    return Template(text).substitute(workspace_mib=int(workspace_mib), tensor_cores=bool(tensor_cores),
                                     prefill_backend=repr(str(prefill_backend)), call_form=repr(str(call_form)))
