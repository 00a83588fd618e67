"""Two GPUs, one workload: which spec figure each part depends on, and the ratio the
roofline expects, across regimes (decode memory- or compute-bound, prefill, KV capacity)."""

from __future__ import annotations

import pytest

from infbench.specs import get_gpu, get_model
from infbench.specs.compare import compare_gpus
from infbench.specs.gpus import GIB


def _part(c, prefix: str):  # noqa: ANN001, ANN202
    return next(r for r in c.regimes if r.part.startswith(prefix))


def _spec(c, prefix: str):  # noqa: ANN001, ANN202
    return next(r for r in c.specs if r.figure.startswith(prefix))


def test_h100_and_h200_differ_in_memory_only() -> None:
    c = compare_gpus(get_model("llama-3.1-8b"), get_gpu("h100"), get_gpu("h200"), batch=64)
    assert _spec(c, "HBM capacity").ratio == pytest.approx(141 / 80)
    assert _spec(c, "HBM bandwidth").ratio == pytest.approx(4.8 / 3.35)
    for same in ("dense BF16", "dense FP8", "GPU link", "L2 cache", "max power", "SMs"):
        assert _spec(c, same).ratio == pytest.approx(1.0), same
    governs = {r.figure for r in c.specs if r.governs}
    assert governs == {"HBM capacity", "HBM bandwidth", "dense BF16 tensor peak"}
    decode, prefill = _part(c, "decode step"), _part(c, "prefill step")
    # decode is memory-bound on both: its throughput moves by the bandwidth ratio exactly
    assert decode.bound == "memory" and decode.depends_on == "HBM bandwidth"
    assert decode.expected == pytest.approx(4.8 / 3.35, rel=1e-9)
    assert prefill.bound == "compute" and prefill.expected == pytest.approx(1.0, rel=1e-9)
    kv = _part(c, "KV capacity")
    # the weights take the same on both, so the pool grows by more than the capacity ratio
    assert kv.expected is not None and kv.expected > 141 / 80 and kv.b > kv.a > 0
    assert not c.b_slower_anywhere and c.fits == (True, True)


def test_large_batch_decode_turns_compute_bound_and_stops_gaining() -> None:
    c = compare_gpus(get_model("llama-3.1-8b"), get_gpu("h100"), get_gpu("h200"),
                     batch=1024, context=128)
    decode = _part(c, "decode step")
    assert decode.bound == "compute" and decode.depends_on == "dense BF16 tensor peak"
    assert decode.expected == pytest.approx(1.0, rel=1e-9)
    assert {r.figure for r in c.specs if r.governs} == {"HBM capacity", "dense BF16 tensor peak"}


def test_fp8_weights_on_a_gpu_without_fp8_run_at_its_bf16_peak() -> None:
    a100, h100 = get_gpu("a100"), get_gpu("h100")
    c = compare_gpus(get_model("llama-3.1-8b"), a100, h100, weight_format="fp8", batch=8,
                     prompt_tokens=8192, chunk_tokens=8192)
    prefill = _part(c, "prefill step")
    assert prefill.depends_on == "dense FP8 tensor peak"
    assert prefill.expected == pytest.approx(h100.fp8_flops / a100.bf16_flops, rel=1e-6)
    assert _spec(c, "dense FP8").a is None and _spec(c, "dense FP8").ratio is None
    assert _spec(c, "dense FP8").governs and not _spec(c, "dense BF16").governs


def test_tensor_parallel_brings_the_link_in() -> None:
    c = compare_gpus(get_model("llama-3.1-70b"), get_gpu("h100"), get_gpu("l40s"), tp=4, batch=16)
    assert _spec(c, "GPU link").governs and _spec(c, "GPU link").ratio == pytest.approx(64 / 900)
    assert "GPU link" in _part(c, "decode step").depends_on
    assert c.b_slower_anywhere  # an L40S is slower than an H100 on every sheet figure that counts


def test_a_model_that_does_not_fit_on_one_side() -> None:
    c = compare_gpus(get_model("llama-3.1-70b"), get_gpu("h100"), get_gpu("mi300x"))
    assert c.fits == (False, True)
    assert _part(c, "KV capacity").expected is None
    assert not any(r.part.startswith("decode at each") for r in c.regimes)
    assert get_gpu("mi300x").memory_bytes == 192 * GIB
