"""The sweep algorithm on a fake target: listed points in order, the ramp doubling until the
curve saturates (or the cap), then open-loop rates between the two ends."""

from __future__ import annotations

from typing import Any

import pytest

from infbench.sweep.loop import SweepPlan, run_points
from infbench.sweep.points import Point


def _target(max_seqs: int) -> tuple[list[tuple[int, Point]], Any]:
    """A closed-loop target whose throughput stops at `max_seqs` in flight."""
    seen: list[tuple[int, Point]] = []

    def run_point(idx: int, p: Point) -> dict[str, Any]:
        seen.append((idx, p))
        batch = min(p.value, max_seqs) if p.kind == "concurrency" else p.value
        return {"request_throughput": float(batch), "output_throughput": 100.0 * batch,
                "median_e2el_ms": 100.0 * max(1.0, p.value / max_seqs), "failed": 0}

    return seen, run_point


def test_listed_points_run_in_order_with_their_index() -> None:
    seen, run_point = _target(64)
    plan = SweepPlan.parse("concurrency", "8,1,2", 1024, 6)
    run_points(plan, run_point, lambda line: None)
    assert seen == [(0, Point("concurrency", 1)), (1, Point("concurrency", 2)),
                    (2, Point("concurrency", 8))]


def test_the_ramp_doubles_until_saturation_then_fills_rates_between_its_ends() -> None:
    seen, run_point = _target(4)
    notes: list[str] = []
    run_points(SweepPlan("auto", max_concurrency=1024, num_rates=2), run_point, notes.append)
    ramp = [p.value for _, p in seen if p.kind == "concurrency"]
    assert ramp[:3] == [1, 2, 4] and ramp[-1] <= 16 and ramp == [2 ** i for i in range(len(ramp))]
    assert notes and notes[0].startswith("saturated: ")
    rates = [p.value for _, p in seen if p.kind == "rate"]
    assert len(rates) == 2 and all(1.0 < r < 4.0 for r in rates)
    assert [i for i, _ in seen] == list(range(len(seen)))


def test_the_ramp_stops_at_the_cap_and_says_so() -> None:
    seen, run_point = _target(1000)
    notes: list[str] = []
    run_points(SweepPlan("auto", max_concurrency=4, num_rates=0), run_point, notes.append)
    assert [p.value for _, p in seen] == [1, 2, 4]
    assert len(notes) == 1 and notes[0].startswith("not saturated by --max-concurrency 4: "), notes


@pytest.mark.parametrize(("kwargs", "words"), [({"max_concurrency": 1}, "max_concurrency"),
                                                ({"num_rates": 51}, "num_rates")])
def test_a_bad_plan_is_refused_naming_the_option(kwargs: dict[str, int], words: str) -> None:
    with pytest.raises(ValueError, match=words):
        SweepPlan("auto", **kwargs)
