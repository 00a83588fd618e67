"""Sweep points, the knee of a curve, and the step-time line."""

from __future__ import annotations

import numpy as np
import pytest

from infbench.sweep.analysis import fit_line, half_sample_mode, roofline_comparison
from infbench.sweep.points import Point, fill_rates, parse_points
from infbench.sweep.saturation import kneedle
from reference_engine.config import EngineConfig
from reference_engine.executor import SamplingParams, SeqWork, StepBatch
from reference_engine.sim_executor import SimExecutor


def test_listed_points_and_errors() -> None:
    assert parse_points("concurrency", "8,1,4") == [Point("concurrency", v) for v in (1, 4, 8)]
    with pytest.raises(ValueError, match="points: '1.5'"):
        parse_points("concurrency", "1,1.5")
    with pytest.raises(ValueError, match="mode"):
        parse_points("burst", "1,2")
    assert parse_points("auto", None) == []


def test_auto_rates_fill_between_the_ends() -> None:
    rates = [p.value for p in fill_rates(2.0, 12.0, 4)]
    assert rates == pytest.approx([4.0, 6.0, 8.0, 10.0])
    with pytest.raises(ValueError, match="max-concurrency"):
        fill_rates(5.0, 5.0, 3)


def test_knee_of_a_saturating_curve() -> None:
    # throughput saturates at 100 while latency climbs: the knee is where it bends
    load = np.array([1, 2, 4, 8, 16, 32, 64], float)
    thr = 100 * load / (load + 8)
    lat = 10 + 0.1 * load + np.where(load > 16, (load - 16) * 2, 0)
    assert load[kneedle(thr, lat)] in (8, 16)


def test_step_line_recovers_intercept_and_slope() -> None:
    rng = np.random.default_rng(0)
    batch = rng.integers(1, 33, 5000).astype(float)
    ms = 6.0 + 0.1 * batch + rng.normal(0, 0.05, batch.size)
    ms[::97] += 20  # host hiccups on single steps must not pull the line
    line = fit_line(batch, ms, "engine_steps")
    assert line is not None
    assert line.intercept_ms == pytest.approx(6.0, abs=0.05)
    assert line.slope_ms == pytest.approx(0.1, abs=0.005)
    assert line.knee_batch == pytest.approx(60, rel=0.05)


@pytest.mark.parametrize(("a", "b", "late_share"), [(6.0, 0.1, 0.6), (3.0, 0.02, 0.7), (9.0, 0.3, 0.5)])
def test_step_line_is_not_pulled_by_a_busy_host_delaying_most_steps(a: float, b: float,
                                                                    late_share: float) -> None:
    rng = np.random.default_rng(int(a * 10))
    batch = rng.integers(1, 49, 8000).astype(float)
    ms = a + b * batch + rng.normal(0, 0.01, batch.size)
    late = rng.random(batch.size) < late_share
    ms[late] += rng.exponential(2.0, late.sum()) * (1 + batch[late] / 48)  # worse when busier
    line = fit_line(batch, ms, "engine_steps")
    assert line is not None
    assert line.slope_ms == pytest.approx(b, rel=0.05) and line.intercept_ms == pytest.approx(a, rel=0.05)


@pytest.mark.parametrize(("a", "b", "late_share", "mean_late_ms"),
                         [(6.0, 0.1, 0.5, 2.0), (3.0, 0.02, 0.7, 1.0), (9.0, 0.3, 0.9, 4.0),
                          (5.3, 0.08, 0.3, 6.0)])
def test_step_line_is_not_pulled_by_catch_up_steps(a: float, b: float, late_share: float,
                                                   mean_late_ms: float) -> None:
    """An engine that keeps a device clock (the bundled engine; a GPU ahead of its host)
    makes a late step up with a short one after it, up to 20 ms: step i lasts
    t + late_i - late_(i-1). A lower quartile sits on the short steps (CI: intercept 0.86x
    the model's); the line must not."""
    rng = np.random.default_rng(int(a * 100))
    batch = np.repeat(rng.integers(1, 49, 80), 100).astype(float)  # stretches at one batch
    late = np.where(rng.random(batch.size + 1) < late_share,
                    rng.exponential(mean_late_ms, batch.size + 1), 0.0)
    ms = a + b * batch + late[1:] - np.minimum(late[:-1], 20.0) + rng.normal(0, 0.01, batch.size)
    line = fit_line(batch, ms, "engine_steps")
    assert line is not None
    assert line.slope_ms == pytest.approx(b, rel=0.05) and line.intercept_ms == pytest.approx(a, rel=0.05)


@pytest.mark.parametrize("values", [[5.0], [1.0, 3.0], [1.0, 2.0, 4.0], [1.0, 3.0, 5.0],
                                    [2.0, 2.0, 2.0, 9.0, 10.0], list(range(10))])
def test_half_sample_mode_of_small_samples(values: list[float]) -> None:
    m = half_sample_mode(np.array(values))
    assert min(values) <= m <= max(values)
    if len(values) >= 5 and values[:3] == [2.0, 2.0, 2.0]:
        assert m == 2.0


@pytest.mark.parametrize(("model", "gpu", "tp", "context", "overhead_ms"),
                         [("meta-llama/Llama-3.1-8B", "H100-SXM", 1, 2064, 0.5),
                          ("meta-llama/Llama-3.1-8B", "A100-80GB-SXM", 1, 600, 0.3),
                          ("meta-llama/Llama-3.1-70B", "H100-SXM", 4, 3100, 0.8)])
def test_the_sims_own_decode_steps_give_the_rooflines_knee_once_floor_and_overhead_are_off(
        model: str, gpu: str, tp: int, context: int, overhead_ms: float) -> None:
    """The sim's decode step is the roofline plus each kernel's floor, the exposed half of its
    math and the fixed overhead; with floor and overhead taken off the measured line's
    intercept and the exposed math off its slope, its knee is the roofline's. (The floor
    left in put the knee 14% high on a quiet machine, and CI's noise did the rest.)"""
    cfg = EngineConfig(model=model, gpu=gpu, tensor_parallel_size=tp, num_gpu_blocks=4000,
                       step_overhead_ms=overhead_ms, max_num_seqs=64)
    ex = SimExecutor(cfg)
    sizes = [b for b in cfg.capture_sizes if b <= 48]  # captured sizes: no padding rows
    ms = [ex.predict(StepBatch(1, [SeqWork(i, [65], context - 1, [], True, SamplingParams(), 1)
                                   for i in range(b)])) * 1e3 for b in sizes]
    line = fit_line(np.array(sizes, float), np.array(ms), "engine_steps")
    assert line is not None
    roof = roofline_comparison({"model": model, "gpu": gpu, "tensor_parallel_size": tp,
                                "step_overhead_ms": overhead_ms}, context, 48, line)
    assert roof is not None
    assert roof["kernel_floor_ms"] == pytest.approx(ex.kernel_floor_s * 1e3)
    assert roof["slope_ratio"] == pytest.approx(1.0, abs=0.03), roof
    assert roof["intercept_ratio_without_overhead"] == pytest.approx(1.0, abs=0.03), roof
    assert roof["measured_knee_batch_without_overhead"] == pytest.approx(roof["roofline_knee_batch"],
                                                                         rel=0.05), roof


@pytest.mark.parametrize(("a", "b", "loads", "transients"),
                         [(7.0, 0.1, {1: 370, 8: 145, 24: 50}, {3: (6, 1.08), 21: (5, 0.93)}),
                          (4.0, 0.03, {2: 300, 16: 120, 48: 40}, {5: (7, 1.10), 40: (5, 0.90)}),
                          (11.0, 0.25, {1: 200, 4: 200, 12: 80}, {2: (5, 1.12), 11: (8, 0.92)})])
def test_a_handful_of_steps_at_a_passing_batch_size_does_not_tilt_the_line(
        a: float, b: float, loads: dict[int, int], transients: dict[int, tuple[int, float]]) -> None:
    """A sweep holds hundreds of steps at each load's batch size and a handful at the sizes
    it passes through; a handful can be late (or catching up) all together, so their most
    common time is off the line. Weighted by steps, they do not tilt it."""
    rng = np.random.default_rng(int(a * b * 1000))
    batch, ms = [], []
    for size, n in loads.items():
        batch += [size] * n
        ms += list(a + b * size + rng.normal(0, 0.02, n))
    for size, (n, factor) in transients.items():
        batch += [size] * n
        ms += list((a + b * size) * factor + rng.normal(0, 0.02, n))
    line = fit_line(np.array(batch, float), np.array(ms), "engine_steps")
    assert line is not None
    assert line.slope_ms == pytest.approx(b, rel=0.05) and line.intercept_ms == pytest.approx(a, rel=0.03)
    assert line.knee_batch == pytest.approx(a / b, rel=0.06)
    assert line.max_relative_error >= 0.07  # the passing sizes are still reported off the line
