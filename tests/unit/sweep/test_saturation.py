"""A knee only where the sweep saturated; the reasons say which sign was seen."""

from __future__ import annotations

import numpy as np
import pytest

from infbench.sweep.saturation import LoadPoint, knee, saturation


def _curve(loads: list[float], a_ms: float, b_ms: float, max_seqs: float = np.inf,
           slo_tpot_ms: float | None = None, failed_from: float | None = None) -> list[LoadPoint]:
    """Closed loop on a step time a + b*B: batch B = min(load, max_seqs); tokens/s = B / t(B)."""
    out = []
    for i, c in enumerate(loads):
        b = min(c, max_seqs)
        t = a_ms + b_ms * b
        good = None if slo_tpot_ms is None else (1.0 if t <= slo_tpot_ms else 0.0)
        failed = 3 if failed_from is not None and c >= failed_from else 0
        out.append(LoadPoint(i, c, 1e3 * b / t, t, good, failed))
    return out


@pytest.mark.parametrize(("a", "b"), [(6.0, 0.02), (10.0, 0.057), (2.0, 0.001)])
def test_points_far_below_the_roofline_knee_have_no_knee(a: float, b: float) -> None:
    pts = _curve([1, 4, 16], a, b)  # knee batch a/b is 105..2000: nothing bends yet
    sat = saturation(pts)
    assert not sat.reached and "raise the load" in sat.reason
    assert knee(pts, sat) is None


@pytest.mark.parametrize(("a", "b", "loads"), [
    (6.0, 0.1, [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]),
    (3.0, 0.5, [1, 2, 4, 8, 16, 32, 64]),
    (8.0, 0.02, [1, 4, 16, 64, 256, 1024, 4096])])
def test_a_curve_that_bends_saturates_past_its_knee_batch(a: float, b: float, loads: list[float]) -> None:
    pts = _curve(loads, a, b)
    sat = saturation(pts)
    assert sat.reached and "stopped rising" in sat.reason
    sat_load = next(p.load for p in pts if p.idx == sat.at_idx)
    assert sat_load > 2.3 * a / b * 0.5  # elasticity a/(a+bB) < 0.3 needs B > 2.3 a/b
    k = knee(pts, sat)
    assert k is not None
    assert next(p.load for p in pts if p.idx == k) <= sat_load


def test_a_batch_cap_is_a_plateau() -> None:
    pts = _curve([1, 2, 4, 8, 16, 32], 5.0, 0.01, max_seqs=6)
    sat = saturation(pts)
    assert sat.reached and sat.at_idx == 4  # 8 -> 16 gains nothing
    assert knee(pts, sat) in (2, 3)


def test_slo_break_and_errors_end_the_ramp_before_throughput_stalls() -> None:
    pts = _curve([1, 2, 4, 8, 16], 6.0, 0.5, slo_tpot_ms=9.0)  # t(8) = 10 ms > 9
    sat = saturation(pts)
    assert sat.reached and "SLO broke at load 8" in sat.reason
    pts = _curve([1, 2, 4, 8, 16], 6.0, 0.01, failed_from=16)
    sat = saturation(pts)
    assert sat.reached and "errors started at load 16" in sat.reason and sat.at_idx == 4


def test_open_loop_rates_that_are_all_served_are_not_a_knee() -> None:
    # achieved == offered at every rate: the old rule named the highest rate the knee
    pts = [LoadPoint(i, r, r * 150.0, 20.0 + i, None, 0) for i, r in enumerate([1, 2, 3, 4, 5])]
    sat = saturation(pts)
    assert not sat.reached and knee(pts, sat) is None
