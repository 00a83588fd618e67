"""A sweep of measured runs: each point is one `run_and_record` at its load (config linked,
GPU samples, Prometheus window, live watch, as any run), linked to the sweep in the store;
then the sweep's analysis, stored with it. `infbench sweep` and the memory playbook's cap test
run theirs here; which loads run, and when the ramp stops, is `infbench.sweep.loop`'s.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infbench.loadgen.arrivals import Arrivals
from infbench.loadgen.preflight import preflight
from infbench.pipeline.record import Warn, run_and_record
from infbench.pipeline.request import (
    LoadSpec,
    RunRequest,
    TargetSpec,
    TelemetrySpec,
    WorkloadSpec,
    check_store_path,
)
from infbench.store import open_store
from infbench.sweep.loop import SweepPlan, analyse_sweep, run_points
from infbench.sweep.points import Point
from infbench.sweep.store import add_point, create_sweep, new_sweep_id


@dataclass(frozen=True)
class SweepRequest:
    """The runs of a sweep: one target, workload, stop and telemetry for every point; the
    plan says at which loads."""

    db: Path
    target: TargetSpec
    workload: WorkloadSpec
    load: LoadSpec
    telemetry: TelemetrySpec
    plan: SweepPlan
    # The sweep's own stored row: how it was asked for (no secret: the key is the target's).
    describe: dict[str, Any] = field(default_factory=dict)
    # Store the engine's resolved settings with the sweep and set its step-time line beside
    # the roofline for the engine's model and GPU (the cap test judges queueing, not steps).
    roofline: bool = True

    def __post_init__(self) -> None:
        check_store_path(self.db)
        if self.load.duration_s is None or self.load.duration_s <= 0:
            raise ValueError("duration: must be > 0")

    def at(self, sweep_id: str, idx: int, p: Point) -> RunRequest:
        """The measured run of point `idx`, tagged with its place in the sweep."""
        return RunRequest(self.db, self.target, self.workload, point_arrivals(p, self.plan),
                          self.load, self.telemetry,
                          tags={"sweep": {"sweep_id": sweep_id, "point_idx": idx, "kind": p.kind,
                                          "value": p.value}})


def point_arrivals(p: Point, plan: SweepPlan) -> Arrivals:
    """A concurrency is a closed loop with that many slots; a rate is Poisson arrivals with at
    most `max_concurrency` in flight."""
    if p.kind == "concurrency":
        return Arrivals("closed", concurrency=int(p.value))
    return Arrivals("poisson", rate=p.value, concurrency=plan.max_concurrency)


def engine_settings(doc: dict[str, Any] | None) -> dict[str, Any] | None:
    """The engine's resolved settings ({name: value}) from its /engine/config document."""
    if doc is None:
        return None
    return {k: (v.get("value") if isinstance(v, dict) else v) for k, v in doc.items()}


def run_sweep(request: SweepRequest, base: str, warn: Warn, announce: Callable[[int, Point], None],
              note: Callable[[str], None]) -> tuple[str, dict[str, Any]]:
    """Run the sweep against the target at `base`; its id and analysis. PreflightError before
    anything is stored when the target cannot be benchmarked (no empty sweep is left)."""
    t = request.target
    target = asyncio.run(preflight(base, t.endpoint, t.model, t.api_key, t.metrics_url))
    engine = engine_settings(target.engine_config) if request.roofline else None
    sweep_id = new_sweep_id()
    con = open_store(request.db)
    try:
        create_sweep(con, sweep_id, request.plan.mode,
                     {**request.describe, **({"engine": engine} if request.roofline else {})})
    finally:
        con.close()

    def run_point(idx: int, p: Point) -> dict[str, Any]:
        announce(idx, p)
        result = run_and_record(request.at(sweep_id, idx, p), base, warn)
        con = open_store(request.db)
        try:
            add_point(con, sweep_id, idx, result.run_id, p.kind, p.value)
        finally:
            con.close()
        return result.summary

    run_points(request.plan, run_point, note)
    con = open_store(request.db)
    try:
        return sweep_id, analyse_sweep(con, sweep_id, request.load.slo_ms, engine)
    finally:
        con.close()
