"""FLOP/byte accounting against hand-computed cases and a brute-force mask, and roofline
classification with given ceilings."""

from __future__ import annotations

import itertools
import json

import pytest

from harness.case import roofline
from harness.case.metrics import attention_work, visible_key_range, visible_keys, visible_pairs
from harness.case.roofline import Ceilings, roofline_metrics


def brute_mask(q: int, s: int, causal: bool, window: int | None) -> list[tuple[int, int]]:
    """(i, j) pairs straight from the API notes: bottom-right causal j <= i + s - q; an HF
    window W keeps i + s - q - j < W (and j - (i + s - q) < W when not causal)."""
    out = []
    for i in range(q):
        d = i + s - q
        for j in range(s):
            if causal and j > d:
                continue
            if window is not None and (d - j >= window or (not causal and j - d >= window)):
                continue
            out.append((i, j))
    return out


def test_visible_pairs_hand_cases():
    assert visible_pairs(3, 5, causal=False, window=None) == 15
    assert visible_pairs(2, 5, causal=True, window=None) == 4 + 5  # the API notes' example
    assert visible_pairs(4, 4, causal=True, window=None) == 1 + 2 + 3 + 4
    assert visible_pairs(5, 3, causal=True, window=None) == 0 + 0 + 1 + 2 + 3  # rows left of key 0
    assert visible_pairs(1, 4096, causal=True, window=None) == 4096  # decode sees everything
    assert visible_pairs(4, 4, causal=True, window=2) == 1 + 2 + 2 + 2
    assert visible_pairs(3, 3, causal=False, window=2) == 2 + 3 + 2


@pytest.mark.parametrize("q,s,causal,window", [
    (q, s, c, w) for q, s, c, w in itertools.product(range(1, 7), range(1, 9), (True, False), (None, 1, 2, 3, 5))
])
def test_visible_pairs_and_keys_match_brute_force(q, s, causal, window):
    pairs = brute_mask(q, s, causal, window)
    assert visible_pairs(q, s, causal, window) == len(pairs)
    keys = sorted({j for _, j in pairs})
    assert visible_keys(q, s, causal, window) == len(keys)
    if keys:  # the union is one interval
        assert visible_key_range(q, s, causal, window) == (keys[0], keys[-1] + 1)
        assert keys == list(range(keys[0], keys[-1] + 1))


def test_visible_keys_sliding_window():
    assert visible_keys(1, 10, True, 3) == 3  # decode: keys 7, 8, 9
    assert visible_keys(10, 10, True, 3) == 10  # prefill: every key is in some row's window
    assert visible_keys(2, 10, True, 3) == 4  # extend: rows at 8 and 9 see keys 6..9


GQA = dict(num_heads=8, num_kv_heads=2, head_size=64, dtype="bfloat16", kv_cache_dtype="auto",
           block_size=16, causal=True, sliding_window=None)


def test_decode_gqa_work_by_hand():
    w = attention_work([1, 1], [100, 37], **GQA)
    assert w.flops == 4 * 8 * 64 * (100 + 37)
    assert w.bytes_q == w.bytes_o == 2 * 8 * 64 * 2  # 2 tokens x Hq x D x bf16
    assert w.bytes_kv == 2 * (100 + 37) * 2 * 64 * 2  # K and V, once per KV head
    assert w.bytes_meta == 4 * (7 + 3) + 4 * (2 * 2 + 1)  # block-table entries + qsl/seq_lens
    assert w.bytes == 2048 + 2048 + 70144 + 60
    assert w.visible_pairs == 100 + 37 and w.kv_tokens_read == 100 + 37  # one decode query sees every key


def test_gqa_reads_kv_once_per_kv_head():
    mha = attention_work([1, 1], [100, 37], **{**GQA, "num_kv_heads": 8})
    gqa = attention_work([1, 1], [100, 37], **GQA)
    assert mha.bytes_kv == 4 * gqa.bytes_kv
    assert mha.flops == gqa.flops and mha.bytes_q == gqa.bytes_q


def test_fp8_kv_is_one_byte_and_leaves_q_o_alone():
    bf16 = attention_work([1, 1], [100, 37], **GQA)
    fp8 = attention_work([1, 1], [100, 37], **{**GQA, "kv_cache_dtype": "fp8_e4m3"})
    assert fp8.bytes_kv == bf16.bytes_kv / 2
    assert (fp8.bytes_q, fp8.bytes_o, fp8.flops) == (bf16.bytes_q, bf16.bytes_o, bf16.flops)


def test_causal_and_non_causal_prefill():
    kw = {**GQA, "num_kv_heads": 8}
    causal = attention_work([8], [8], **kw)
    full = attention_work([8], [8], **{**kw, "causal": False})
    assert causal.flops == 4 * 8 * 64 * 36  # 1 + 2 + ... + 8
    assert full.flops == 4 * 8 * 64 * 64
    assert causal.bytes == full.bytes  # the last row reads every key either way


def test_sliding_window_counts_only_the_window_and_its_blocks():
    w = attention_work([1], [100], **{**GQA, "sliding_window": 10})
    assert w.flops == 4 * 8 * 64 * 10
    assert w.bytes_kv == 2 * 10 * 2 * 64 * 2
    # keys 90..99 straddle blocks 5 and 6: two block-table entries, not ceil(10/16) = 1
    assert w.bytes_meta == 4 * 2 + 4 * 3


def test_worked_example_in_docs():
    """docs/measurement.md's worked example: Llama-3-8B decode, 4 requests."""
    w = attention_work([1, 1, 1, 1], [1000, 2000, 3000, 4000], num_heads=32, num_kv_heads=8, head_size=128,
                       dtype="bfloat16", kv_cache_dtype="auto", block_size=16, causal=True, sliding_window=None)
    assert w.flops == 163_840_000
    assert w.bytes_q == 32_768
    assert w.bytes_kv == 40_960_000
    assert w.bytes_meta == 2_540
    assert w.bytes == 41_028_076


def test_bad_input_is_one_clear_error():
    with pytest.raises(ValueError, match="unknown element size"):
        attention_work([1], [10], **{**GQA, "dtype": "int4"})
    with pytest.raises(ValueError, match="query lengths"):
        attention_work([1, 1], [10], **GQA)


# ---------------------------------------------------------------- roofline
CEIL = Ceilings(device="test", key="k", mem_bytes_per_s=4e12, flops_per_s=800e12)


def test_ridge_point():
    assert CEIL.ridge == 200.0


def test_memory_bound_classification():
    m = roofline_metrics(flops=1e9, nbytes=1e9, seconds=0.5e-3, ceilings=CEIL)
    assert m["intensity"] == 1.0 and m["tbps"] == pytest.approx(2.0) and m["tflops"] == pytest.approx(2.0)
    r = m["roofline"]
    assert r["bound"] == "memory"
    assert r["pct_of_ceiling"] == pytest.approx(50.0) == r["pct_of_bw"]
    assert r["pct_of_flops"] == pytest.approx(0.25)


def test_compute_bound_classification():
    m = roofline_metrics(flops=1e12, nbytes=1e9, seconds=2.5e-3, ceilings=CEIL)
    r = m["roofline"]
    assert m["intensity"] == 1000.0 and r["bound"] == "compute"
    assert m["tflops"] == pytest.approx(400.0)
    assert r["pct_of_ceiling"] == pytest.approx(50.0) == r["pct_of_flops"]


def test_at_the_ridge_counts_as_compute_bound():
    assert roofline_metrics(200e9, 1e9, 1e-3, CEIL)["roofline"]["bound"] == "compute"
    assert roofline_metrics(199e9, 1e9, 1e-3, CEIL)["roofline"]["bound"] == "memory"


def test_no_ceilings_or_no_time():
    m = roofline_metrics(1e9, 1e9, 1e-3, None, "no ceilings on cpu")
    assert m["roofline"] == {"reason": "no ceilings on cpu"} and m["tbps"] == pytest.approx(1.0)
    m = roofline_metrics(1e9, 1e9, None, CEIL)
    assert m["tflops"] is None and m["roofline"]["pct_of_ceiling"] is None


def test_ceilings_cache_location_and_cpu(tmp_path, monkeypatch):
    import torch

    monkeypatch.setenv(roofline.CACHE_ENV, str(tmp_path))
    assert roofline.cache_path() == tmp_path / "ceilings.json"
    assert roofline.get_ceilings(torch.device("cpu")) == (None, "no ceilings on cpu")
    roofline._write_cache(roofline.cache_path(), {"gpu|driver 1|torch 2": {"mem_bytes_per_s": 1.0}})
    assert json.loads(roofline.cache_path().read_text())["gpu|driver 1|torch 2"]["mem_bytes_per_s"] == 1.0
    roofline.cache_path().write_text("{not json")
    assert roofline._read_cache(roofline.cache_path()) == {}
