"""step_time (the engine's contract) and the roofline analysis around it."""

from __future__ import annotations

import pytest

from infbench.specs import SpecError, get_gpu, get_model
from infbench.specs.gpus import DEFAULT_BANDWIDTH_FRACTION
from infbench.specs.roofline import _causal_pairs, cost_model, step_time
from infbench.specs.throughput import roofline_report


def test_batch1_decode_is_weight_bytes_over_bandwidth() -> None:
    m, g = get_model("llama-3.1-8b"), get_gpu("h100")
    bd = step_time(m, g, decode_contexts=[1])
    p = m.params
    weights = (p.total - p.embedding) * 2  # the head is read, the embedding is only indexed
    assert bd.weight_bytes == weights
    assert bd.memory_s == pytest.approx(bd.bytes_moved / (3.35e12 * DEFAULT_BANDWIDTH_FRACTION))
    assert bd.seconds == bd.memory_s and bd.bound == "memory" and bd.comm_s == 0


def test_step_time_contract_attributes_and_overrides() -> None:
    m, g = get_model("llama-3.1-8b"), get_gpu("h100")
    bd = step_time(
        m,
        g,
        tp=1,
        weight_format="bf16",
        kv_format="bf16",
        prefill_chunks=[(512, 0)],
        decode_contexts=[100, 200],
        bandwidth_fraction=1.0,
        flops_fraction=1.0,
    )
    assert bd.seconds == max(bd.memory_s, bd.compute_s)
    assert bd.bytes_moved > 0 and bd.flops > 0 and bd.tokens == 514
    slower = step_time(
        m, g, prefill_chunks=[(512, 0)], decode_contexts=[100, 200], bandwidth_fraction=0.5
    )
    assert slower.memory_s == pytest.approx(2 * bd.memory_s)


def test_kv_bytes_grow_with_context_and_fp8_halves_them() -> None:
    m, g = get_model("llama-3.1-8b"), get_gpu("h100")
    a = step_time(m, g, decode_contexts=[1000] * 4)
    assert a.kv_bytes == 4 * 1000 * 131_072
    assert step_time(m, g, kv_format="fp8", decode_contexts=[1000] * 4).kv_bytes == a.kv_bytes / 2


def test_long_prefill_is_compute_bound_and_flops_follow_2_params_per_token() -> None:
    m, g = get_model("llama-3.1-8b"), get_gpu("h100")
    bd = step_time(m, g, prefill_chunks=[(8192, 0)])
    assert bd.bound == "compute"
    # no embedding lookup, no head, no norms: matmul weights only
    linear = 2 * (m.params.total - 2 * m.params.embedding - m.params.norms) * 8192
    head = 2 * m.params.embedding  # logits for the chunk's last token only
    pairs = 8192 * 8193 // 2 * 32  # causal (query, key) pairs over 32 layers
    attention = pairs * 4 * 32 * 128  # QK^T and PV: 2 x 2 x head_dim per head
    assert bd.flops == linear + head + attention


def test_moe_decode_reads_only_routed_experts() -> None:
    m, g = get_model("mixtral-8x7b"), get_gpu("h100")
    one = step_time(m, g, tp=2, decode_contexts=[1])
    many = step_time(m, g, tp=2, decode_contexts=[1] * 256)
    cm = cost_model(m, g, 2)
    assert cm.expected_experts(1) == pytest.approx(2)
    assert one.weight_bytes < 0.35 * many.weight_bytes  # 2 of 8 experts vs all 8
    assert many.weight_bytes == pytest.approx(
        cm.always_read_bytes + 32 * 8 * cm.expert_bytes, rel=1e-6
    )


def test_tp_adds_all_reduce_time() -> None:
    m, g = get_model("llama-3.1-70b"), get_gpu("h100")
    bd = step_time(m, g, tp=4, decode_contexts=[1000] * 8)
    assert bd.comm_s > 0 and bd.seconds == pytest.approx(max(bd.memory_s, bd.compute_s) + bd.comm_s)


def test_causal_pairs_with_and_without_window() -> None:
    assert _causal_pairs(4, 0, None) == 1 + 2 + 3 + 4
    assert _causal_pairs(4, 10, None) == 11 + 12 + 13 + 14
    assert _causal_pairs(4, 0, 2) == 1 + 2 + 2 + 2
    assert _causal_pairs(3, 5, 4) == 12
    for chunk, before, window in [(7, 3, 5), (10, 0, 4), (3, 9, 100)]:
        brute = sum(min(before + i + 1, window) for i in range(chunk))
        assert _causal_pairs(chunk, before, window) == brute


def test_empty_step_and_bad_inputs() -> None:
    m, g = get_model("llama-3.1-8b"), get_gpu("h100")
    assert step_time(m, g).seconds == 0
    with pytest.raises(SpecError, match="prefill chunk"):
        step_time(m, g, prefill_chunks=[(0, 0)])
    with pytest.raises(SpecError, match="bandwidth_fraction"):
        step_time(m, g, decode_contexts=[1], bandwidth_fraction=0)


def test_roofline_report_ceilings_line_and_knee() -> None:
    m, g = get_model("llama-3.1-8b"), get_gpu("h100")
    r = roofline_report(m, g, batch=32, context=2048)
    # bf16 8B on H100 at 0.6/0.8: ridge ~ 594 TFLOP/s / 2.68 TB/s ~ 221 FLOP/B ~ 220 tokens
    assert 150 < r.compute_bound_prompt_tokens < 300
    assert r.ceilings.lowest == "KV capacity"
    assert r.ceilings.compute_ridge is None  # 2048-token KV reads keep decode memory-bound
    assert r.line.max_relative_error < 0.01  # decode is a line in B while memory-bound
    assert r.line.knee_batch == pytest.approx(r.line.intercept_s / r.line.slope_s)
    assert [p.batch for p in r.curve][0] == 1
    tps = [p.tokens_per_s for p in r.curve]
    assert tps == sorted(tps)
    assert r.ttft_s == pytest.approx(r.prefill.seconds)  # one chunk


def test_short_context_decode_has_a_compute_ridge() -> None:
    r = roofline_report(get_model("llama-3.1-8b"), get_gpu("h100"), context=128, max_num_seqs=1024)
    assert r.ceilings.compute_ridge is not None and r.ceilings.lowest == "compute ridge"
    assert r.ceilings.limit == r.ceilings.compute_ridge


def test_ttft_sums_chunks() -> None:
    r = roofline_report(
        get_model("llama-3.1-8b"), get_gpu("h100"), prompt_tokens=10_000, chunk_tokens=4096
    )
    assert r.ttft_chunks == 3 and r.ttft_s > r.prefill.seconds * 0.9


def test_negative_batch_is_rejected() -> None:
    with pytest.raises(SpecError, match="batch must be a positive integer"):
        roofline_report(get_model("llama-3.1-8b"), get_gpu("h100"), batch=-1)
