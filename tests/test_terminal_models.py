"""The closing block of `harness run` with model shapes: one line per model shape and workload
kind (winner or tie, margin [interval]) and the vLLM / SGLang flags on an indented line, before
the per-case-group verdict; nothing of it when no row names a model shape."""

from __future__ import annotations

import pytest

import io
from pathlib import Path

from rich.console import Console
from helpers.typed_rows import CFG, check, host, timing

from harness.report.terminal import tables as terminal
from harness.records.results import ResultRow

DECODE = {"num_reqs": 64, "num_tokens": 64, "num_decode": 64, "num_prefill": 0, "num_extend": 0,
          "max_query_len": 1, "max_seq_len": 4000, "mean_seq_len": 3000.0, "prefix_groups": 0}
PREFILL = {"num_reqs": 1, "num_tokens": 2048, "num_decode": 0, "num_prefill": 1, "num_extend": 0,
           "max_query_len": 2048, "max_seq_len": 2048, "mean_seq_len": 2048.0, "prefix_groups": 0}
FA3 = ("flash-attn", {"fa_version": 3})
FI = ("flashinfer", {"decode_tensor_cores": True, "prefill_backend": "auto"})
LLAMA, GEMMA = "llama-3.1-8b/tp1", "gemma-2-9b/tp1/local"


def row(cand, median, case, model, batch, half=0.2) -> ResultRow:
    backend, variant = cand
    return ResultRow(suite="s", case=case, backend=backend, variant=variant,
                     variant_label=",".join(f"{k}={v}" for k, v in sorted(variant.items())), status="pass",
                     config=CFG, batch=batch, check=check(True), host=host(),
                     timing=timing(median, median - half, median + half), case_group=model or case,
                     case_params={"model": model} if model else {})


def model_rows() -> list[ResultRow]:
    return [row(FI, 10.0, "a-dec", LLAMA, DECODE), row(FA3, 15.0, "a-dec", LLAMA, DECODE),
            row(FI, 130.0, "a-pre", LLAMA, PREFILL), row(FA3, 100.0, "a-pre", LLAMA, PREFILL),
            row(FA3, 20.0, "b-dec", GEMMA, DECODE), row(FI, 20.2, "b-dec", GEMMA, DECODE)]


def closing(rows: list[ResultRow], width: int = 80) -> list[str]:
    buf = io.StringIO()
    console = Console(file=buf, width=width, force_terminal=False, color_system=None)
    terminal.print_summary(rows, Path("out"), console, console)
    return buf.getvalue().splitlines()


def joined(block: list[str]) -> list[str]:
    """The block's logical lines: a wrapped line's continuations (deeper indent) joined back."""
    out: list[str] = []
    for ln in block:
        depth = len(ln) - len(ln.lstrip())
        if out and depth > len(out[-1]) - len(out[-1].lstrip()) + 2:
            out[-1] += " " + ln.strip()
        else:
            out.append(ln)
    return out


def test_model_lines_and_flags_come_before_the_verdict_per_case_group():
    lines = closing(model_rows())
    head = next(i for i, ln in enumerate(lines) if ln.startswith("Answer per model shape"))
    verdict = next(i for i, ln in enumerate(lines) if ln.startswith("Verdict per case group"))
    assert head < verdict
    start = next(i for i in range(head, verdict) if lines[i].startswith("  "))
    block = lines[head:verdict]
    # Wrapped between words, with a hanging indent: no line wider than the console, none padded.
    assert all(len(ln) <= 80 and ln == ln.rstrip() for ln in block), block
    logical = joined(lines[start:verdict])
    # Summary ids: A = flash-attn fa_version=3, B = flashinfer (sorted by backend name).
    assert len(logical) == 9, logical  # 3 model shape / workload pairs, each with a vLLM and an SGLang line
    dec, dec_v, dec_s, pre, pre_v, pre_s, tie, tie_v, tie_s = logical
    assert dec.startswith(f"  {LLAMA} decode: B flashinfer, +50.0% [") and dec.endswith("over A flash-attn")
    assert dec_v.startswith("    vLLM: --attention-backend FLASHINFER (vLLM before PR #26315: VLLM_ATTENTION_BACKEND=")
    assert dec_s == "    SGLang: --decode-attention-backend flashinfer"
    assert pre.startswith(f"  {LLAMA} prefill: A flash-attn, +30.0% [")  # 130 / 100
    assert pre_v == ("    vLLM: --attention-backend FLASH_ATTN --attention-config '{\"flash_attn_version\": 3}' "
                     "(vLLM before PR #26315: VLLM_ATTENTION_BACKEND=FLASH_ATTN VLLM_FLASH_ATTN_VERSION=3)")
    assert pre_s == "    SGLang: --prefill-attention-backend fa3"
    assert tie.startswith(f"  {GEMMA} decode: tie (interval reaches 0): A flash-attn ~ B flashinfer, +1.0% [")
    assert tie_s == "    SGLang: --decode-attention-backend fa3"


def test_rows_without_model_shapes_print_no_model_block():
    plain = [row(c, m, case, None, b) for c, m, case, b in
             ((FI, 10.0, "dec", DECODE), (FA3, 15.0, "dec", DECODE), (FA3, 100.0, "pre", PREFILL))]
    lines = closing(plain)
    assert not any(ln.startswith("Answer per model shape") for ln in lines)
    assert any(ln.startswith("Verdict per case group") for ln in lines)
    assert not any("--attention-backend" in ln for ln in lines)


def test_one_setting_per_model_weights_its_layer_kinds_by_layer_count():
    from harness.analysis.per_model import model_settings
    from harness.report.terminal.per_model import model_setting_lines

    def kind_row(cand, median, kind, layers):
        r = row(cand, median, f"g/{kind}", f"g/tp1/{kind}", DECODE)
        r.case_params = {"model": f"g/tp1/{kind}", "model_id": "g", "tp": 1, "layers": kind, "layer_count": layers}
        return r

    # FA3 wins the 5 local layers 2x, FlashInfer the 1 global layer 3x: unweighted FlashInfer
    # would win (log 200 < log 300), weighted by layers FA3 does.
    rows = [kind_row(FA3, 10.0, "local", 5), kind_row(FI, 20.0, "local", 5),
            kind_row(FA3, 30.0, "global", 1), kind_row(FI, 10.0, "global", 1)]
    (s,) = model_settings(rows, "vllm")
    assert s["model"] == "g/tp1" and s["layers"] == "5 local + 1 global" and "FLASH_ATTN" in s["flags"]
    assert s["geomean_cost_pct"] == pytest.approx(((3.0 ** (1 / 6)) - 1) * 100)
    (line,) = model_setting_lines(rows)
    assert line.startswith("g/tp1 (5 local + 1 global layers): vLLM --attention-backend FLASH_ATTN")
    # without layer counts (and no built-in to look them up) the kinds weigh the same: FlashInfer
    for r in rows:
        r.case_params = {k: v for k, v in r.case_params.items() if k != "layer_count"}
    (s,) = model_settings(rows, "vllm")
    assert s["layers"].startswith("unknown") and s["flags"] == "--attention-backend FLASHINFER"


def test_committed_gemma_rows_get_layer_counts_from_the_builtin_table():
    from harness.analysis.per_model import layer_weight

    r = row(FA3, 10.0, "c", "gemma-2-9b/tp1/local", DECODE)
    r.case_params = {"model": "gemma-2-9b/tp1/local", "model_id": "gemma-2-9b", "tp": 1, "layers": "local"}
    assert layer_weight(r) == 21
