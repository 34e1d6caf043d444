"""The names a backend's ``standalone_call`` source reads, bound from the harness's own batch.

``harness crosscheck`` re-times a row's library call on *the row's inputs*: the batch
``harness.case.workload.generate`` makes on the row's device from the case and its seed (what
``harness.cell.case.CaseContext`` times), in the order the backend asks for (decode-first, as
``prepare_cell`` reorders it). Drawing the repro script's inputs instead costs a CPU generator
pass over the whole KV cache (minutes for a GB-sized cache on a small host) and gives other bits.

Only the constant part of the repro inputs runs (its leading imports and UPPER_CASE
assignments: dtypes, head counts, scale, window, ...); every tensor and length list the
``standalone_call`` docstring names (attn_contract/backend.py) comes from the batch.
"""

from __future__ import annotations

import ast
import math
import sys
from typing import Any

import torch

from attn_contract.standalone import STANDALONE_NAMES

from attn_contract import AttentionBackend, decode_first_order
from harness.case.reference import visible_mask
from harness.case.workload import Batch


def constants_part(inputs_source: str) -> str:
    """The leading statements of the repro inputs that bind constants: imports and
    assignments whose targets are all UPPER_CASE names; stops at the first other statement
    (the seeded draws). Keeps ``harness/crosscheck/repro.py``'s text the one place the constants are written."""
    tree = ast.parse(inputs_source)
    keep: list[ast.stmt] = []
    for stmt in tree.body:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)) or (
                isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)):  # the docstring
            keep.append(stmt)
            continue
        if isinstance(stmt, ast.Assign) and all(_upper_names(t) for t in stmt.targets):
            keep.append(stmt)
            continue
        break
    return ast.unparse(ast.Module(body=keep, type_ignores=[]))


def _upper_names(t: ast.expr) -> bool:
    if isinstance(t, ast.Name):
        return t.id.isupper()
    if isinstance(t, ast.Tuple):
        return all(_upper_names(e) for e in t.elts)
    return False


def backend_view(batch: Batch, backend: type[AttentionBackend], variant: dict[str, Any]) -> Batch:
    """The batch in the order the backend sees it (``prepare_cell``'s decode-first reorder)."""
    threshold = backend.capabilities(variant).reorder_batch_threshold
    if threshold is None:
        return batch
    view, _ = batch.reordered(decode_first_order(batch.query_lens, threshold))
    return view


def bind_from_batch(constants: str, view: Batch) -> dict[str, Any]:
    """The namespace a ``standalone_call`` source runs in: the constants (executed), then the
    batch's tensors under the agreed names, on the batch's device."""
    ns: dict[str, Any] = {"__name__": "__crosscheck__", "math": math, "sys": sys, "torch": torch}
    exec(compile(constants, "<crosscheck constants>", "exec"), ns)
    cfg = view.config
    qlens, slens = list(view.query_lens), list(view.seq_lens)
    for name, mine in (("QUERY_LENS", qlens), ("SEQ_LENS", slens)):
        if name in ns and list(ns[name]) != mine:  # the repro's case and the batch disagree: never time other shapes
            raise ValueError(f"{name} of the repro constants {ns[name]} differ from the batch's {mine}")
    dev = view.device
    kv = view.kv_cache  # canonical (num_blocks, 2, block_size, Hk, D), contiguous
    if cfg.kv_layout == "HND":  # same logical shape, heads before tokens in memory (as the repro lays it)
        kv = kv.permute(0, 1, 3, 2, 4).contiguous().permute(0, 1, 3, 2, 4)
    else:
        kv = kv.clone()  # the call may not write into the batch
    qsl = [0]
    for ql in qlens:
        qsl.append(qsl[-1] + ql)
    causal, window = cfg.causal, cfg.sliding_window

    def visible(i: int) -> torch.Tensor:
        """Request i's mask [query_len, seq_len] on the CPU (bottom-right causal, sliding window)."""
        return visible_mask(qlens[i], slens[i], causal, window, torch.device("cpu"))

    layer = view.layer
    ns.update(
        q=view.query.clone(), kv_cache=kv, block_table=view.block_table.to(device=dev, dtype=torch.int32),
        seq_lens=torch.tensor(slens, dtype=torch.int32, device=dev),
        query_start_loc=torch.tensor(qsl, dtype=torch.int32, device=dev),
        QUERY_LENS=qlens, SEQ_LENS=slens, QSL=qsl, n=len(qlens), visible=visible,
        K_SCALE=float(layer.k_scale), V_SCALE=float(layer.v_scale),
        ALIBI_SLOPES=layer.alibi_slopes.to(dev).float() if layer.alibi_slopes is not None else None,
        SINKS=layer.sinks.to(dev).float() if layer.sinks is not None else None,
    )
    missing = [k for k in STANDALONE_NAMES if k not in ns]
    if missing:  # the contract's list grew: this binding must define the new names too
        raise ValueError(f"the standalone call's names {missing} are not bound from the batch")
    return ns


__all__ = ["backend_view", "bind_from_batch", "constants_part"]
