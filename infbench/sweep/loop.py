"""The sweep algorithm: which loads are run, in which order, and when the ramp stops; then the
analysis of the points, stored with the sweep.

A point is run by the function the caller gives (`infbench.pipeline.sweep` gives one measured
run, recorded like any other), so this module needs no load generator: it sees a point's run
only through the summary that function returns.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import duckdb

from infbench.sweep.analysis import analyse
from infbench.sweep.points import Point, fill_rates, parse_points
from infbench.sweep.saturation import LoadPoint, saturation
from infbench.sweep.store import save_result

# A point's index in its sweep and its load -> the summary of the run measured there.
RunPoint = Callable[[int, Point], dict[str, Any]]


@dataclass(frozen=True)
class SweepPlan:
    """`listed` points run in order; none listed (mode auto): a closed-loop ramp up to
    `max_concurrency`, then `num_rates` open-loop rates between its two ends."""

    mode: str  # concurrency | rate | auto
    listed: list[Point] = field(default_factory=list)
    max_concurrency: int = 1024
    num_rates: int = 6

    def __post_init__(self) -> None:
        if self.max_concurrency < 2:
            raise ValueError("max_concurrency: must be >= 2")
        if not 0 <= self.num_rates <= 50:
            raise ValueError("num_rates: must be in 0..50")

    @classmethod
    def parse(cls, mode: str, points: str | None, max_concurrency: int, num_rates: int) -> SweepPlan:
        """From `infbench sweep`'s options; ValueError (one line naming the option)."""
        return cls(mode, parse_points(mode, points), max_concurrency, num_rates)


def run_points(plan: SweepPlan, run_point: RunPoint, note: Callable[[str], None]) -> None:
    """Run every point of the plan through `run_point`, index by index."""
    if plan.listed:
        for i, p in enumerate(plan.listed):
            run_point(i, p)
        return
    ramp = ramp_until_saturated(run_point, plan.max_concurrency, note)
    rates = fill_rates(ramp[0]["request_throughput"],
                       max(r["request_throughput"] for r in ramp), plan.num_rates)
    for i, p in enumerate(rates, start=len(ramp)):
        run_point(i, p)


def ramp_until_saturated(run_point: RunPoint, max_concurrency: int,
                         note: Callable[[str], None]) -> list[dict[str, Any]]:
    """Closed loop at 1, 2, 4, ... until the points show saturation (throughput stopped
    rising, the SLO broke, errors started) or `max_concurrency` is reached."""
    summaries: list[dict[str, Any]] = []
    curve: list[LoadPoint] = []
    c = 1
    while True:
        s = run_point(len(summaries), Point("concurrency", c))
        summaries.append(s)
        share = s.get("goodput_fraction")
        curve.append(LoadPoint(len(curve), c, float(s.get("output_throughput") or 0.0),
                               s.get("median_e2el_ms"), share, int(s.get("failed") or 0)))
        sat = saturation(curve)
        if sat.reached:
            note(f"saturated: {sat.reason}")
            return summaries
        if c >= max_concurrency:
            note(f"not saturated by --max-concurrency {max_concurrency}: {sat.reason}")
            return summaries
        c = min(2 * c, max_concurrency)


def analyse_sweep(con: duckdb.DuckDBPyConnection, sweep_id: str, slo: dict[str, float],
                  engine: dict[str, Any] | None) -> dict[str, Any]:
    """The analysis of the sweep's stored points (`analysis.analyse`), saved with the sweep."""
    pts = [(int(i), str(r), str(k), float(v)) for i, r, k, v in con.execute(
        "SELECT point_idx, run_id, kind, value FROM sweep_points WHERE sweep_id = ? "
        "ORDER BY value, point_idx", [sweep_id]).fetchall()]
    result = analyse(con, pts, slo, engine)
    result["sweep_id"] = sweep_id
    save_result(con, sweep_id, result)
    return result
