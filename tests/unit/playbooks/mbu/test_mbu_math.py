"""The MBU arithmetic, the step-time fit and the dashboard-mistake classifier, on numbers
whose answers are known."""

from __future__ import annotations

import numpy as np
import pytest

from playbooks.mbu.compute import compute, padded_batch
from playbooks.mbu.mistakes import RunFacts, candidates, classify
from playbooks.mbu.setup import MbuSetup, byte_model, resolve_setup
from playbooks.mbu.steps import DecodeSteps

BM = byte_model(MbuSetup(model="meta-llama/Llama-3.1-8B", gpu="H100-SXM"))


def _steps(batch: np.ndarray, ctx_per_seq: np.ndarray, dur: np.ndarray) -> DecodeSteps:
    ctx = batch * ctx_per_seq
    return DecodeSteps(sql="", step_id=np.arange(len(batch)), dur_s=dur, batch=batch, ctx_sum=ctx,
                       kv_bytes=ctx * BM.kv_bytes_per_token, weight_bytes=BM.weights(batch),
                       matched=int(batch.sum()), logged=int(batch.sum()), all_steps=len(batch),
                       mixed_steps=0, mixed_dur_s=0.0, preemptions=0)


def test_llama_8b_bytes_per_step() -> None:
    # 8.03 B parameters in bf16 (the head counted once per step), 128 KiB of KV per token
    assert BM.always_read == pytest.approx(2 * (8.03e9 - 0.525e9), rel=0.01)
    assert BM.kv_bytes_per_token == 32 * 8 * 128 * 2 * 2
    assert BM.peak_bandwidth == 3.35e12


def test_mbu_and_buckets_recover_a_known_kernel_rate_and_overhead() -> None:
    rng = np.random.default_rng(1)
    batch = rng.integers(1, 64, 400).astype(float)
    ctx = rng.uniform(500, 6000, 400)
    steps = _steps(batch, ctx, np.zeros(400))
    achieved, fixed = 0.5 * BM.peak_bandwidth, 2e-3    # kernels at half the datasheet rate
    steps.dur_s = fixed + steps.bytes / achieved
    res = compute(steps, BM)
    assert res.mbu == pytest.approx(steps.bytes.sum() / steps.dur_s.sum() / BM.peak_bandwidth)
    assert res.separable
    assert res.fit["achieved_bandwidth"] == pytest.approx(achieved, rel=1e-6)
    assert res.fit["intercept_s"] == pytest.approx(fixed, rel=1e-6)
    ideal = steps.bytes.sum() / BM.peak_bandwidth / steps.dur_s.sum()
    assert res.buckets["kernel_efficiency"] == pytest.approx(ideal, rel=1e-6)  # half -> 1x ideal
    assert res.buckets["host_launch_overhead"] == pytest.approx(400 * fixed / steps.dur_s.sum())
    assert abs(res.buckets["unexplained"]) < 1e-9
    assert sum(res.buckets.values()) + res.mbu == pytest.approx(1.0)


def test_weight_bound_steps_are_not_separable() -> None:
    batch = np.full(300, 8.0)
    steps = _steps(batch, np.full(300, 400.0), np.random.default_rng(2).normal(7e-3, 2e-4, 300))
    res = compute(steps, BM)
    assert not res.separable
    assert res.buckets["host_launch_overhead"] == 0.0
    assert res.buckets["kernel_efficiency"] == pytest.approx(1 - res.mbu, abs=1e-3)


def test_padding_to_capture_sizes() -> None:
    sizes = (1, 2, 4, 8, 16, 24, 32)
    assert list(padded_batch(np.array([1.0, 3, 5, 17, 33]), sizes)) == [1, 4, 8, 24, 33]
    assert list(padded_batch(np.array([3.0]), ())) == [3]


def _facts(**kw: float) -> RunFacts:
    base = dict(mbu=0.42, weight_share=0.7, tp=2, bytes_per_param=2.0, achievable_fraction=0.8,
                decode_step_s=0.010, tpot_s=0.012, e2e_per_token_s=0.015, mean_batch=16.0,
                max_num_seqs=256, concurrency=32)
    base.update(kw)
    return RunFacts(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize("mistake", ["achievable_bandwidth", "kv_bytes_forgotten", "tp_not_divided",
                                     "bytes_per_param", "tpot_includes_prefill", "wrong_batch_size",
                                     "weights_per_sequence"])
def test_each_mistake_applied_to_the_correct_figure_is_named(mistake: str) -> None:
    f = _facts()
    applied = [c for c in candidates(f) if c.mistake == mistake]
    assert applied, mistake
    for c in applied:  # every variant (4 bytes/param, batch 1, ...) is named by its own figure
        hits = classify(c.predicted, f)
        best = [h for h, err in hits if err == hits[0][1]]
        # named first; tied only with a mistake that gives the very same figure (here 4 bytes
        # per parameter and TP 2 not divided both double the weights), and then both are named
        assert c in best and len(best) <= 2, (c, hits[:3])


def test_the_right_figure_a_compound_mistake_and_an_unexplained_one() -> None:
    f = _facts()
    assert classify(0.42, f)[0][0].mistake == "correct"
    both = 0.42 / 0.8 * 0.7  # achievable bandwidth and weights only
    assert classify(both, f)[0][0].mistake == "achievable_bandwidth+kv_bytes_forgotten"
    assert classify(0.05, f) == []


def test_setup_from_the_engine_config_and_overrides() -> None:
    cfg = {"engine_config": {"model": {"value": "meta-llama/Llama-3.1-8B"}, "gpu": {"value": "H100-SXM"},
                             "dtype": {"value": "fp8"}, "kv_cache_dtype": {"value": "auto"},
                             "cudagraph_capture_sizes": {"value": [1, 2, 4, 8, 512]},
                             "cudagraph_max_capture_size": {"value": 8}},
           "target": {"engine_args": ["--tensor-parallel-size", "2"]}}
    s = resolve_setup(cfg, None, {"gpu": "A100-80GB"})
    assert (s.model, s.gpu, s.tp, s.weight_format, s.kv_format) == (
        "meta-llama/Llama-3.1-8B", "A100-80GB", 2, "fp8", "fp8")
    assert s.capture_sizes == (1, 2, 4, 8) and s.source["gpu"] == "command-line option"
    with pytest.raises(ValueError, match="--gpu"):
        resolve_setup({}, "m", {})
