"""The stalls playbook on documented synthetic timelines (playbooks/synthetic.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from infbench.store import open_store
from playbooks import Diagnosis, StallOptions, diagnose_stalls
from playbooks.periodicity import fit_period
from playbooks.synthetic import write_timeline


def _diag(tmp_path: Path, **kw: object) -> Diagnosis:
    con = open_store(tmp_path / "s.duckdb")
    try:
        write_timeline(con, **kw)  # type: ignore[arg-type]
        return diagnose_stalls(con, "last")
    finally:
        con.close()


def test_healthy_lockstep_decode_has_no_findings(tmp_path: Path) -> None:
    diag = _diag(tmp_path, requests=32, concurrency=8, tokens=80)
    assert diag.findings == []
    assert diag.context["stall_events"]["engine_wide"] == 0


@pytest.mark.parametrize(("every", "ms"), [(25, 120.0), (60, 400.0)])
def test_engine_wide_periodic_stall_found_with_its_period(tmp_path: Path, every: int, ms: float) -> None:
    diag = _diag(tmp_path, requests=40, concurrency=8, tokens=150, stall_every=every, stall_ms=ms)
    f = diag.sorted_findings()[0]
    assert f.verdict == "periodic_engine_stall"
    ev = {e.name: e.values for e in f.evidence}
    assert ev["period_steps"]["period"] == pytest.approx(every, rel=0.02)
    assert ev["engine_wide_stalls"]["median_gap_ms"] == pytest.approx(ms + 6.0, rel=0.05)
    assert all(e.sql is None or "$" not in e.sql for e in f.evidence)  # rendered, rerunnable


def test_client_timeline_alone_still_separates_engine_wide_from_private(tmp_path: Path) -> None:
    diag = _diag(tmp_path, requests=24, concurrency=8, tokens=120, stall_every=40, stall_ms=150,
                 private={3: (60, 700.0)}, steps=False)
    assert not diag.data_sources["engine_steps"]
    assert {"periodic_engine_stall", "private_stall"} <= set(diag.verdicts())
    assert any("No engine step log" in n for n in diag.notes)


def test_diagnosis_round_trips_through_json(tmp_path: Path) -> None:
    diag = _diag(tmp_path, requests=16, concurrency=8, tokens=120, stall_every=30, stall_ms=200)
    assert Diagnosis.from_dict(diag.to_dict()).to_dict() == diag.to_dict()


def test_bad_options_name_the_field() -> None:
    with pytest.raises(ValueError, match="itl_target_ms"):
        StallOptions(itl_target_ms=0).validate()


def test_period_fit_tolerates_missed_events_and_rejects_random_times() -> None:
    t = np.delete(np.arange(30) * 0.5, [4, 5, 11, 20])
    fit = fit_period(t)
    assert fit is not None and fit.period == pytest.approx(0.5, rel=0.01) and fit.missed == 4
    rnd = fit_period(np.sort(np.random.default_rng(1).uniform(0, 30, 30)))
    assert rnd is not None and rnd.strength < 0.6
