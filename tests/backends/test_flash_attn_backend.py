"""FlashAttention adapter on the CPU: version selection, capability rules, availability reasons,
and the metadata builder's host logic on a real generated mixed batch. The kernel calls
themselves are verified on the GPU (see docs/backends/flash_attn.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from attn_contract import AttentionConfig, CudaGraphSupport, LayerParams, MultipleOf, decode_first_order
from backends.flash_attn import (
    FA2,
    FA3,
    FA4,
    GENERATIONS,
    MODULES,
    FlashAttentionBackend,
    FlashAttentionImpl,
    FlashAttentionMetadataBuilder,
    availability_from,
    capabilities_for,
    detect_features,
    documented_features,
    fa_window,
    resolve_version,
    select_fa_version,
    support_reason,
)
from harness.spec import CaseSpec, load_suite
from harness.case.workload import generate

ROOT = Path(__file__).resolve().parents[2]
H100, A100, B200, RTX5090, V100 = (9, 0), (8, 0), (10, 0), (12, 0), (7, 0)


def cfg(**kw) -> AttentionConfig:
    base = dict(num_heads=32, num_kv_heads=8, head_size=128, dtype="bfloat16", block_size=16)
    base.update(kw)
    return AttentionConfig(**base)


def doc(v: int):
    return documented_features(v, installed=True)


def reason(v: int, c: AttentionConfig, cc=H100) -> str | None:
    return support_reason(v, c, cc, doc(v))


# ------------------------------------------------------------------ version selection
@pytest.mark.parametrize(
    "config,cc,expected",
    [
        (cfg(), H100, 3),  # Hopper: FA3 by default
        (cfg(head_size=64), H100, 3),
        (cfg(head_size=256), H100, 3),
        (cfg(softcap=30.0), H100, 4),  # softcap is compiled out of tokenspeed FA3 -> FA4
        (cfg(alibi=True, block_size=256), H100, 2),  # ALiBi: FA2 only
        (cfg(), B200, 4),  # Blackwell: FA4
        (cfg(head_size=192, block_size=256), B200, 2),  # FA4 on sm100 lacks 192 -> FA2 fallback
        (cfg(block_size=256), A100, 2),
        (cfg(block_size=256), RTX5090, 2),
    ],
)
def test_select_version(config, cc, expected):
    v, why = select_fa_version(config, cc)
    assert v == expected, why


def test_select_version_nothing_fits_names_every_rejection():
    v, why = select_fa_version(cfg(head_size=512), H100)
    assert v is None
    assert "FA3 rejected" in why and "FA4 rejected" in why and "FA2 rejected" in why and "512" in why
    v, why = select_fa_version(cfg(alibi=True, block_size=16), H100)
    assert v is None and "ALiBi" in why and "256" in why
    v, why = select_fa_version(cfg(head_size=192), B200)  # FA4 lacks 192, FA2 lacks block 16
    assert v is None and "FA4 rejected" in why and "FA2 rejected" in why


def test_select_version_hardware():
    assert select_fa_version(cfg(), V100)[0] is None
    assert "sm80" in select_fa_version(cfg(), V100)[1]
    assert select_fa_version(cfg(), None) == (None, "no CUDA device to select a FlashAttention version for")
    # without a config: the device default, as vLLM's get_flash_attn_version
    assert select_fa_version(None, H100)[0] == 3 and select_fa_version(None, B200)[0] == 4
    assert select_fa_version(None, A100)[0] == 2


def test_select_uses_the_given_usability():
    # FA3 not installed on a Hopper machine: auto falls to FA4, and says why.
    v, why = select_fa_version(cfg(), H100, lambda n: "not installed" if n == 3 else None)
    assert v == 4 and "FA3 rejected (not installed)" in why


def test_explicit_overrides():
    assert resolve_version({"fa_version": 3}, cfg(head_size=512)) == (3, "explicit")
    assert resolve_version({"fa_version": "2"})[0] == 2  # --variant values arrive as strings
    assert resolve_version({"fa_version": 5})[0] is None
    assert "unknown fa_version" in resolve_version({"fa_version": "x"})[1]


def test_variants_and_defaults():
    assert {str(v["fa_version"]) for v in FlashAttentionBackend.variants()} == {"auto", "2", "3", "4"}
    # both call forms of every version by default (vLLM's call first)
    assert FlashAttentionBackend.default_variants() == [
        {"fa_version": v, "call_form": f} for v in (2, 3, 4) for f in ("vllm", "fastest")]
    assert {v["call_form"] for v in FlashAttentionBackend.variants()} == {"vllm", "fastest"}


# ------------------------------------------------------------------ capability rules
def test_fa2_rules():
    assert reason(2, cfg(block_size=256)) is None
    r = reason(2, cfg(block_size=16))
    assert "block_size 16" in r and "256" in r
    assert "fp8" in reason(2, cfg(block_size=256, kv_cache_dtype="fp8_e4m3"))
    assert "head_size 512" in reason(2, cfg(head_size=512, block_size=256))
    assert "head_size 100" in reason(2, cfg(head_size=100, block_size=256))  # not a multiple of 8
    assert "sinks" in reason(2, cfg(block_size=256, sinks=True))
    assert reason(2, cfg(block_size=512, alibi=True, softcap=30.0, sliding_window=128)) is None


def test_fa3_rules():
    assert reason(3, cfg(block_size=16)) is None
    assert reason(3, cfg(block_size=1)) is None  # any page size
    assert reason(3, cfg(kv_cache_dtype="fp8_e4m3")) is None
    assert "e5m2" in reason(3, cfg(kv_cache_dtype="fp8_e5m2"))
    assert "bf16 output" in reason(3, cfg(kv_cache_dtype="fp8_e4m3", dtype="float16"))
    assert "% 16" in reason(3, cfg(kv_cache_dtype="fp8_e4m3", head_size=72, num_heads=8, num_kv_heads=8))
    assert "ALiBi" in reason(3, cfg(alibi=True))
    assert "softcap" in reason(3, cfg(softcap=30.0))  # tokenspeed build
    assert reason(3, cfg(sinks=True, sliding_window=256)) is None
    assert "head_size 512" in reason(3, cfg(head_size=512))
    # FA3 is Hopper-only; fp8 there too
    assert "Hopper" in support_reason(3, cfg(kv_cache_dtype="fp8_e4m3"), B200, doc(3))


def test_fa3_build_flags_shape_the_table():
    upstream = documented_features(3, installed=True)
    from dataclasses import replace

    with_softcap = replace(upstream, softcap=True, head_buckets=(128, 256))
    assert support_reason(3, cfg(softcap=30.0), H100, with_softcap) is None
    assert support_reason(3, cfg(head_size=64), H100, with_softcap) is None  # rounded up to 128
    small = replace(upstream, head_buckets=(64, 128))  # HDIM192/256 compiled out
    assert "head_size 192" in support_reason(3, cfg(head_size=192), H100, small)
    no_fp8 = replace(upstream, fp8=False)
    assert "compiled out" in support_reason(3, cfg(kv_cache_dtype="fp8_e4m3"), H100, no_fp8)
    no_fp16 = replace(upstream, fp16=False)
    assert "float16" in support_reason(3, cfg(dtype="float16"), H100, no_fp16)
    caps = capabilities_for(3, H100, replace(upstream, scheduler_metadata=False))
    assert caps.cudagraph == CudaGraphSupport.UNIFORM_BATCH
    assert capabilities_for(3, H100, upstream).cudagraph == CudaGraphSupport.ALWAYS


def test_fa4_rules():
    assert reason(4, cfg(block_size=16)) is None
    assert reason(4, cfg(head_size=256, num_heads=16)) is None
    assert "fp8" in reason(4, cfg(kv_cache_dtype="fp8_e4m3"))
    assert "ALiBi" in reason(4, cfg(alibi=True))
    assert reason(4, cfg(softcap=30.0, sinks=True, sliding_window=512)) is None
    assert "head_size 512" in reason(4, cfg(head_size=512))
    assert "head_size 192" in support_reason(4, cfg(head_size=192), B200, doc(4))
    assert support_reason(4, cfg(head_size=256), B200, doc(4)) is None


@pytest.mark.parametrize("v", [2, 3, 4])
def test_common_declarations(v):
    caps = capabilities_for(v, H100, doc(v))
    assert caps.returns_lse and caps.gqa and caps.causal and caps.non_causal
    assert caps.kv_layouts == frozenset({"NHD", "HND"})
    assert caps.reorder_batch_threshold == 1
    assert caps.devices == frozenset({"cuda"})


def test_backend_check_support_without_a_gpu():
    # device "cpu": one clear reason, before any library is touched
    assert FlashAttentionBackend.check_support(cfg(), {"fa_version": 3}, "cpu").startswith("runs on cuda, not cpu")
    # rules that hold for every build read the same through the backend
    r = FlashAttentionBackend.check_support(cfg(kv_cache_dtype="fp8_e4m3", block_size=256), {"fa_version": 2}, "cuda")
    assert "FA2 has no fp8" in r
    assert "block_size 16" in FlashAttentionBackend.check_support(cfg(), {"fa_version": 2}, "cuda")
    assert "head_size 512" in FlashAttentionBackend.check_support(cfg(head_size=512), {"fa_version": 4}, "cuda")
    if not torch.cuda.is_available():
        assert "no CUDA device" in FlashAttentionBackend.check_support(cfg(), {"fa_version": "auto"}, "cuda")


# ------------------------------------------------------------------ availability
def test_availability_reasons():
    no_lib = documented_features(2, installed=False, error="cannot import flash_attn: ModuleNotFoundError: x")
    a = availability_from(2, no_lib, H100)
    assert not a.available and "cannot import flash_attn" in a.reason
    a = availability_from(3, doc(3), None)
    assert not a.available and "no CUDA device" in a.reason
    assert "Hopper" in availability_from(3, doc(3), B200).reason
    assert "sm80" in availability_from(2, doc(2), V100).reason
    assert "sm90/sm100/sm110" in availability_from(4, doc(4), A100).reason
    assert availability_from(4, doc(4), B200).available and availability_from(2, doc(2), RTX5090).available
    from dataclasses import replace

    old_cute = replace(doc(4), paged=False)  # FA2's sdist snapshot of flash_attn/cute
    assert "paged" in availability_from(4, old_cute, H100).reason


@pytest.mark.parametrize("v,module", [(2, "flash_attn"), (3, "flash_attn_interface"), (4, "flash_attn.cute")])
def test_availability_here_is_honest(v, module):
    """On this machine: the real import decides; a missing library is a human reason."""
    a = FlashAttentionBackend.availability({"fa_version": v})
    feats = detect_features(v)
    if not feats.installed:
        assert not a.available and f"cannot import {module}" in a.reason
    elif not torch.cuda.is_available():
        assert not a.available and "no CUDA device" in a.reason
    auto = FlashAttentionBackend.availability({"fa_version": "auto"})
    assert auto.available or all(f"FA{n}" in auto.reason for n in (2, 3, 4))


def test_capabilities_describe_for_every_variant():
    for variant in FlashAttentionBackend.variants():
        d = FlashAttentionBackend.capabilities(variant).describe()
        assert d["returns_lse"] is True and d["reorder_batch_threshold"] == 1


def test_fa_window():
    assert fa_window(cfg(), 2) == (-1, -1) and fa_window(cfg(), 4) == (None, None)
    assert fa_window(cfg(sliding_window=256), 3) == (255, 0)
    assert fa_window(cfg(sliding_window=256), 4) == (255, 0)
    assert fa_window(cfg(sliding_window=256, causal=False), 2) == (255, 255)


# ------------------------------------------------------------------ metadata builder (host logic)
MIXED = CaseSpec(
    name="mixed", num_heads=8, num_kv_heads=2, head_size=64, block_size=16, seed=3,
    batch=[
        {"kind": "prefill", "count": 2, "query_len": {"dist": "uniform", "low": 20, "high": 70}},
        {"kind": "decode", "count": 4, "context_len": {"dist": "uniform", "low": 1, "high": 90}},
        {"kind": "extend", "count": 2, "query_len": {"dist": "uniform", "low": 2, "high": 30},
         "context_len": {"dist": "uniform", "low": 5, "high": 60}},
    ],
)


def _mixed_common():
    batch = generate(MIXED, "cpu")
    order = decode_first_order(batch.query_lens, 1)
    assert order != list(range(batch.num_reqs))  # prefills came first: reordering moved them
    view, _ = batch.reordered(order)
    return view, view.common_metadata()


@pytest.mark.parametrize("v", [2, 3, 4])
def test_builder_segments_mixed_batch(v):
    view, common = _mixed_common()
    variant = {"fa_version": v, "call_form": "fastest"}
    md = FlashAttentionMetadataBuilder(view.config, variant, torch.device("cpu")).build(common)
    assert md.fa_version == v and md.num_decodes == 4 and md.num_prefills == 4
    assert [s.kind for s in md.segments] == ["decode", "prefill"]
    dec, pre = md.segments
    qsl = view.query_start_loc
    assert (dec.req_start, dec.req_end, pre.req_start, pre.req_end) == (0, 4, 4, 8)
    assert (dec.token_start, dec.token_end) == (0, 4)
    assert (pre.token_start, pre.token_end) == (4, view.num_tokens)
    for seg in md.segments:
        lo, hi = seg.req_start, seg.req_end
        assert seg.query_start_loc.dtype == torch.int32 and seg.seq_lens.dtype == torch.int32
        assert seg.query_start_loc.tolist() == [q - qsl[lo] for q in qsl[lo : hi + 1]]
        assert seg.seq_lens.tolist() == view.seq_lens[lo:hi]
        assert seg.max_seq_len == max(view.seq_lens[lo:hi])
        assert seg.max_query_len == max(view.query_lens[lo:hi])
        nblk = -(-seg.max_seq_len // 16)
        assert seg.block_table.is_contiguous() and seg.block_table.shape == (hi - lo, nblk)
        assert torch.equal(seg.block_table, common.block_table[lo:hi, :nblk])
    assert dec.max_query_len == 1
    if v == 2:
        assert dec.cu_seqlens_k is None  # decode goes through flash_attn_with_kvcache
        cu = [0]
        for s in view.seq_lens[4:]:
            cu.append(cu[-1] + s)
        assert pre.cu_seqlens_k.tolist() == cu and pre.cu_seqlens_k.dtype == torch.int32
    else:
        assert pre.cu_seqlens_k is None
    if v == 3:
        assert not md.scheduler_metadata_used and "no CUDA" in md.scheduler_metadata_note
    impl = FlashAttentionImpl(view.config, variant, torch.device("cpu"), view.layer)
    assert "mixed query lengths" in impl.graph_safe(md)
    call = impl.describe_call(md)
    assert call["fa_version"] == v and [s["kind"] for s in call["segments"]] == ["decode", "prefill"]
    assert call["call_form"] == "fastest" and dec.batched and not pre.batched
    with pytest.raises(RuntimeError, match="CUDA only"):
        impl.forward(view.query, view.key, view.value, view.kv_cache, md, torch.empty_like(view.query))


def test_builder_single_segment_batches():
    dec = MIXED.model_copy(update={"batch": [MIXED.batch[1]]})
    pre = MIXED.model_copy(update={"batch": [MIXED.batch[0]]})
    b = generate(dec, "cpu")
    md = FlashAttentionMetadataBuilder(b.config, {"fa_version": 4}, torch.device("cpu")).build(b.common_metadata())
    assert [s.kind for s in md.segments] == ["decode"] and md.uniform_batch
    impl = FlashAttentionImpl(b.config, {"fa_version": 4}, torch.device("cpu"), b.layer)
    assert impl.graph_safe(md) is None  # uniform batch: graph-safe at UNIFORM_BATCH level
    b = generate(pre, "cpu")
    md = FlashAttentionMetadataBuilder(b.config, {"fa_version": 2}, torch.device("cpu")).build(b.common_metadata())
    assert [s.kind for s in md.segments] == ["prefill"] and md.num_decodes == 0
    assert md.segments[0].token_end == b.num_tokens


def test_builder_auto_without_gpu_is_a_clear_error():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    b = generate(MIXED, "cpu")
    with pytest.raises(ValueError, match="no CUDA device"):
        FlashAttentionMetadataBuilder(b.config, {"fa_version": "auto"}, torch.device("cpu"))


# ------------------------------------------------------------------ suites
@pytest.mark.parametrize("name", ["prefill", "mixed", "fp8"])
def test_suites_load_and_give_every_version_cells(name):
    suite = load_suite(ROOT / "suites" / f"{name}.yaml")
    assert suite.cases
    configs = [c.attention_config() for c in suite.cases]
    for v in (2, 3, 4) if name != "fp8" else (3,):
        assert any(reason(v, c) is None for c in configs), f"no {name} cell FA{v} can run"
    if name == "fp8":
        assert {c.kv_cache_dtype for c in configs} == {"auto", "fp8_e4m3", "fp8_e5m2", "nvfp4"}


# ------------------------------------------------------------------ one class per generation
def test_generations_are_registered_by_version():
    assert GENERATIONS == {2: FA2, 3: FA3, 4: FA4}
    assert MODULES == {2: "flash_attn", 3: "flash_attn_interface", 4: "flash_attn.cute"}
    for v, gen in GENERATIONS.items():
        assert gen.documented(True).version == v
        assert set(gen.kernels) == {"decode", "prefill"}
        assert all(k.startswith(gen.module + ".") for k in gen.kernels.values())


@pytest.mark.parametrize("gen,cc,blocks,kv,heads_ok,heads_bad,cudagraph", [
    (FA2, H100, (MultipleOf(256),), {"auto"}, [8, 128, 256], [4, 100, 264], CudaGraphSupport.UNIFORM_BATCH),
    (FA2, A100, (MultipleOf(256),), {"auto"}, [64, 256], [512], CudaGraphSupport.UNIFORM_BATCH),
    (FA3, H100, (MultipleOf(1),), {"auto", "fp8_e4m3"}, [64, 80, 256], [264, 512], CudaGraphSupport.ALWAYS),
    (FA3, B200, (MultipleOf(1),), {"auto"}, [128], [512], CudaGraphSupport.ALWAYS),  # fp8 is Hopper-only
    (FA4, H100, (MultipleOf(1),), {"auto"}, [8, 192, 256], [264], CudaGraphSupport.UNIFORM_BATCH),
    (FA4, B200, (MultipleOf(1),), {"auto"}, [64, 128, 256], [136, 192, 264], CudaGraphSupport.UNIFORM_BATCH),
])
def test_generation_capability_tables(gen, cc, blocks, kv, heads_ok, heads_bad, cudagraph):
    caps = gen.capabilities(cc, gen.documented(True))
    assert caps.block_sizes == blocks and caps.kv_cache_dtypes == frozenset(kv) and caps.cudagraph == cudagraph
    assert all(caps.head_sizes.allows(h) for h in heads_ok)
    assert not any(caps.head_sizes.allows(h) for h in heads_bad)
    assert caps.alibi == (gen is FA2) and caps.sinks == (gen is not FA2)
    assert caps.softcap == (gen is not FA3)  # the tokenspeed FA3 build compiles softcap out
    assert "limits documented (library not importable here)" in caps.notes


def test_generation_table_follows_the_library_features():
    from dataclasses import replace

    feats = replace(FA3.documented(True), detected=True, head_buckets=(64, 128), fp8=False, softcap=True)
    caps = FA3.capabilities(H100, feats)
    assert caps.head_sizes.max == 128 and caps.kv_cache_dtypes == frozenset({"auto"}) and caps.softcap
    assert "limits detected from the installed library" in caps.notes
    assert not FA2.capabilities(H100, replace(FA2.documented(True), alibi=False)).alibi


# ------------------------------------------------------------------ the auto selector
@pytest.mark.parametrize("config,cc,expected,why", [
    (cfg(head_size=192), H100, 3, "Hopper"),  # FA3 has a 192 kernel in the documented build
    (cfg(kv_cache_dtype="fp8_e4m3"), H100, 3, "Hopper"),
    (cfg(kv_cache_dtype="fp8_e4m3", dtype="float16"), H100, None, "bf16 output"),  # no one else has fp8
    (cfg(kv_cache_dtype="fp8_e5m2"), H100, None, "e5m2"),
    (cfg(kv_cache_dtype="fp8_e4m3"), B200, None, "FA4 has no public fp8"),
    (cfg(head_size=256, softcap=30.0), H100, 4, "FA3 rejected"),
    (cfg(alibi=True, block_size=256), B200, 2, "ALiBi"),
    (cfg(block_size=256, head_size=64), RTX5090, 2, "sm120: FA2"),
    (cfg(block_size=16), RTX5090, None, "FA2 rejected"),
])
def test_selector_by_head_size_alibi_gpu_and_fp8(config, cc, expected, why):
    v, reason = select_fa_version(config, cc)
    assert v == expected and why in reason, reason


def test_selector_head_size_falls_through_to_the_next_generation():
    from dataclasses import replace

    no192 = replace(FA3.documented(True), head_buckets=(64, 128))  # HDIM192/256 compiled out

    def usable(v):
        return support_reason(v, cfg(head_size=192), H100, no192 if v == 3 else documented_features(v, True))

    v, why = select_fa_version(cfg(head_size=192), H100, usable)
    assert v == 4 and "FA3 rejected" in why and "head_size 192" in why


# ------------------------------------------------------------------ per-generation call state (CPU)
def _layer(heads: int) -> LayerParams:
    g = torch.Generator().manual_seed(0)
    return LayerParams(sinks=torch.randn(heads, generator=g), alibi_slopes=torch.rand(heads, generator=g))


def test_generation_call_state():
    c = cfg(sinks=True, sliding_window=64)
    cpu = torch.device("cpu")
    assert FA3(c, _layer(32), cpu, H100).sinks.dtype == torch.bfloat16  # tokenspeed FA3 wants bf16
    assert FA4(c, _layer(32), cpu, H100).sinks.dtype == torch.float32
    assert FA2(c, _layer(32), cpu, A100).sinks.dtype == torch.float32
    assert FA4(c, _layer(32), cpu, H100).num_splits == 1 and FA4(c, _layer(32), cpu, None).num_splits == 1
    assert FA4(c, _layer(32), cpu, B200).num_splits == 0
    assert FA4(c, _layer(32), cpu, B200).window_size == (63, 0) and FA2(c, _layer(32), cpu, A100).window_size == (63, 0)
    assert FA2(cfg(alibi=True), _layer(32), cpu, A100).alibi.dtype == torch.float32
    assert not FA3(c, _layer(32), cpu, H100).fn  # entry points are loaded on CUDA only


def test_fa3_fp8_query_quantization():
    q = torch.randn(10, 32, 128, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    cpu = torch.device("cpu")
    same, scale = FA3(cfg(), _layer(32), cpu, H100).prepare_query(q)
    assert same is q and scale is None  # only with an fp8 KV cache
    q8, scale = FA3(cfg(kv_cache_dtype="fp8_e4m3"), _layer(32), cpu, H100).prepare_query(q)
    assert q8.dtype == torch.float8_e4m3fn and scale.shape == (1, 1)
    assert float(q8.float().abs().max()) == 448.0  # the per-tensor scale maps the largest |q| to e4m3's max
    back = q8.float() * scale
    assert torch.allclose(back, q.float(), rtol=0.07, atol=float(scale) * 2)


def test_no_version_branches_outside_the_generation_classes():
    """backend.py never compares an FA version with a number: the generation classes own that."""
    import ast

    src = (ROOT / "backends" / "flash_attn" / "backend.py").read_text()
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.Compare):
            names = [n.attr if isinstance(n, ast.Attribute) else getattr(n, "id", "") for n in [node.left, *node.comparators]]
            consts = [n.value for n in [node.left, *node.comparators] if isinstance(n, ast.Constant)]
            assert not ("fa_version" in names and any(c in (2, 3, 4) for c in consts)), ast.unparse(node)
    assert "getattr(self, f" not in src  # no method names built as strings
