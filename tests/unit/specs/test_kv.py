"""KV-cache arithmetic against published per-token figures."""

from __future__ import annotations

import pytest

from infbench.specs import SpecError, get_model
from infbench.specs.kv import kv_layout, kv_report


def test_llama_70b_bf16_kv_is_327680_bytes_per_token() -> None:
    # 80 layers x 2 (K,V) x 8 KV heads x 128 head_dim x 2 bytes = 327,680 B/token, as in
    # NVIDIA's "Mastering LLM Techniques: Inference Optimization" KV sizing and vLLM docs.
    r = kv_report(get_model("llama-3.1-70b"))
    assert r.bytes_per_token == 327_680
    assert r.attention == "GQA"


def test_deepseek_v3_mla_kv_is_70272_bytes_per_token() -> None:
    # DeepSeek-V2/V3 papers: MLA caches kv_lora_rank (512) + qk_rope_head_dim (64) per
    # layer per token: 61 x (512 + 64) x 2 bytes = 70,272 B/token in bf16.
    r = kv_report(get_model("deepseek-v3"))
    assert r.bytes_per_token == 61 * (512 + 64) * 2 == 70_272
    assert r.attention == "MLA"


def test_mla_cache_is_replicated_on_every_tp_rank() -> None:
    r = kv_report(get_model("deepseek-v3"), tp=8, context=1000)
    assert r.bytes_per_token_per_gpu == 70_272
    assert r.replication == 8
    assert r.bytes_per_sequence_all_gpus == 8 * r.bytes_per_sequence_per_gpu


def test_gqa_splits_heads_then_duplicates_beyond_kv_head_count() -> None:
    m = get_model("llama-3.1-70b")  # 8 KV heads
    assert kv_report(m, tp=4).bytes_per_token_per_gpu == 327_680 / 4
    at8 = kv_report(m, tp=8)
    assert at8.kv_heads_per_gpu == 1 and at8.replication == 1
    at16 = kv_report(m, tp=16)  # 64 heads / 16: each rank still needs one whole KV head
    assert at16.kv_heads_per_gpu == 1 and at16.replication == 2
    assert at16.bytes_per_token_per_gpu == at8.bytes_per_token_per_gpu


def test_fp8_kv_halves_the_bytes() -> None:
    m = get_model("llama-3.1-8b")
    assert (
        kv_report(m, kv_format="fp8").bytes_per_token == kv_report(m).bytes_per_token / 2 == 65_536
    )


def test_sliding_window_layers_stop_growing_past_the_window() -> None:
    m = get_model("gemma-2-9b")  # 42 layers, 21 sliding with window 4096
    per_layer = 2 * 8 * 256 * 2
    short = kv_report(m, context=2048)
    long = kv_report(m, context=8192)
    assert short.bytes_per_sequence == 42 * 2048 * per_layer
    assert long.bytes_per_sequence == (21 * 8192 + 21 * 4096) * per_layer
    assert kv_layout(m).layer_tokens(10_000) == 21 * 10_000 + 21 * 4096


def test_blocks_and_waste_bound() -> None:
    r = kv_report(get_model("llama-3.1-8b"), context=1000, block_size=16)
    assert r.blocks_per_sequence == 63  # ceil(1000 / 16)
    assert r.waste_tokens == 63 * 16 - 1000 == 8
    assert r.waste_bound_tokens == 15
    assert r.waste_bound_bytes_per_gpu == 15 * 131_072


def test_tp_must_divide_heads_and_context_must_be_positive() -> None:
    m = get_model("llama-3.1-70b")
    with pytest.raises(SpecError, match="tp=3 does not divide num_attention_heads=64"):
        kv_report(m, tp=3)
    with pytest.raises(SpecError, match="tp must be a positive integer"):
        kv_report(m, tp=0)
    with pytest.raises(SpecError, match="context"):
        kv_report(m, context=-5)
