"""The stalls playbook on documented synthetic timelines (tests/support/synthetic_runs.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from playbooks import Diagnosis, StallOptions, diagnose_stalls
from playbooks.stalls.periodicity import fit_period
from tests.support.stores import new_store
from tests.support.synthetic_runs import write_timeline


def _diag(tmp_path: Path, **kw: object) -> Diagnosis:
    con = new_store(tmp_path / "s.duckdb")
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
    # next steps name only data this run could have had: no step log to compare with
    for f in diag.findings:
        assert not any("compare with the step log" in a for a in f.next_actions), f.next_actions
    wide = next(f for f in diag.findings if f.verdict == "periodic_engine_stall")
    assert any("profiler trace" in a for a in wide.next_actions)


def test_a_run_with_a_step_log_is_pointed_at_it(tmp_path: Path) -> None:
    diag = _diag(tmp_path, requests=24, concurrency=8, tokens=120, stall_every=35, stall_ms=180)
    wide = next(f for f in diag.findings if f.verdict == "periodic_engine_stall")
    assert any("compare with the step log" in a for a in wide.next_actions)


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


def test_client_that_reads_late_is_not_a_stall(tmp_path: Path) -> None:
    # Every 40 steps the client stops reading for 150 ms, then reads what arrived (~25
    # tokens per request) at once: every stream shows a 150 ms gap at the same time, as an
    # engine pause would. Spread over the events of that read it is 6 ms per token.
    con = new_store(tmp_path / "s.duckdb")
    try:
        write_timeline(con, requests=24, concurrency=8, tokens=150, client_hold_every=40,
                       client_hold_ms=150, steps=False)
        raw = con.execute("""
            SELECT count(*) FROM (SELECT t_ns - lag(t_ns) OVER (PARTITION BY request_idx
                                  ORDER BY seq) AS gap FROM chunks WHERE content)
            WHERE gap > 100e6""").fetchone()[0]
        diag = diagnose_stalls(con, "last")
    finally:
        con.close()
    assert raw >= 24 * 2  # the raw per-event gaps would cross the stall threshold
    assert diag.context["stall_events"]["engine_wide"] == 0
    assert diag.findings == []
    assert diag.context["itl_baseline"]["coalesced_chunks"] > 0


def test_stalls_at_random_steps_are_engine_wide_but_not_periodic(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    at = np.cumsum(rng.exponential(45, 30)).astype(int) + 5
    diag = _diag(tmp_path, requests=48, concurrency=8, tokens=240, stall_at=at.tolist(),
                 stall_ms=180)
    assert diag.verdicts()[0] == "engine_wide_stall"
    f = diag.sorted_findings()[0]
    ev = {e.name: e.values for e in f.evidence}
    assert ev["engine_wide_stalls"]["events"] >= 25
    assert ev["period_steps"]["significant"] is False and ev["period_steps"]["strength"] == 0.0
    assert "no regular period" in f.summary


@pytest.mark.parametrize(("every_s", "ms"), [(0.85, 140.0), (1.3, 70.0)])
def test_timer_stall_reported_in_seconds_and_steps_on_one_grid(tmp_path: Path, every_s: float,
                                                               ms: float) -> None:
    diag = _diag(tmp_path, requests=40, concurrency=8, tokens=250, stall_every_s=every_s,
                 stall_ms=ms)
    f = diag.sorted_findings()[0]
    assert f.verdict == "periodic_engine_stall"
    ev = {e.name: e.values for e in f.evidence}
    sec, steps = ev["period_seconds"], ev["period_steps"]
    # The timer fires at the first 6 ms step boundary at or after each due time, on a fixed
    # schedule: the period is every_s.
    assert float(sec["period"]) == pytest.approx(every_s, abs=0.001)
    # Same events, same number of periods: the steps period is the seconds period in steps
    # (one stalled step of 6 + ms and the rest at 6 ms).
    assert float(steps["period"]) == pytest.approx((float(sec["period"]) * 1e3 - ms) / 6.0,
                                                   abs=0.3)
    assert (sec["events_on_period"], sec["missed_periods"]) == (steps["events_on_period"],
                                                                steps["missed_periods"])
    # Steps, seconds and tokens advance in lockstep here: the playbook must say it cannot
    # tell the clocks apart rather than pick one.
    assert "cannot tell these sources apart" in f.summary


def test_baseline_numbers_are_those_duckdb_gives_over_the_itl_view(tmp_path: Path) -> None:
    # The baseline is computed in numpy from the rows of GAPS_SQL (the itl view is
    # evaluated once); DuckDB's own aggregates over the same rows must give the same numbers.
    con = new_store(tmp_path / "s.duckdb")
    try:
        write_timeline(con, requests=20, concurrency=5, tokens=90, stall_every=17, stall_ms=75,
                       client_hold_every=5, client_hold_ms=17, private={4: (30, 300.0)})
        diag = diagnose_stalls(con, "last")
        row = con.execute("""
            SELECT count(*), median(itl_ms), mad(itl_ms), quantile_cont(itl_ms, 0.9),
                   quantile_cont(itl_ms, 0.99), max(itl_ms),
                   (SELECT count(*) FROM itl WHERE coalesced)
            FROM itl WHERE itl_ms IS NOT NULL AND NOT coalesced""").fetchone()
    finally:
        con.close()
    base = diag.context["itl_baseline"]
    got = [base[k] for k in ("gaps", "median_ms", "mad_ms", "p90_ms", "p99_ms", "max_ms",
                             "coalesced_chunks")]
    assert got == pytest.approx([round(float(v), 3) for v in row], abs=1e-3)
    assert base["coalesced_chunks"] > 0 and base["mad_ms"] > 0


@pytest.mark.parametrize(("first_ms", "second_ms", "at"), [(60.0, 140.0, 49), (75.0, 210.0, 120)])
def test_a_gap_belongs_to_the_step_covering_it_not_the_next_long_one(
        tmp_path: Path, first_ms: float, second_ms: float, at: int) -> None:
    """Two long steps back to back: the token ending the first one's gap reaches the client
    a few microseconds after the second (longer) step began. Each gap is that step's; the
    longer step touching the first gap must not claim it too (it was counted twice)."""
    from playbooks.context import load_context
    from playbooks.stalls.events import baseline, find_events, load_gaps
    con = new_store(tmp_path / "s.duckdb")
    try:
        write_timeline(con, requests=8, concurrency=4, tokens=200,
                       slow={at: first_ms, at + 1: second_ms})
        ctx = load_context(con, "last", {"model": None, "gpu": None})
        gaps = load_gaps(con, ctx.run_id)
        base = baseline(con, ctx.run_id, gaps, 50.0)
        assert base is not None
        ev = find_events(con, ctx.run_id, ctx.t0_ns, base, True, False)
    finally:
        con.close()
    assert sorted(ev.covering_step_id.tolist()) == [at, at + 1]
    assert sorted(ev.covering_step_ms.round().tolist()) == [6 + first_ms, 6 + second_ms]


@pytest.mark.parametrize(("request_idx", "at", "ms"), [(3, 40, 160.0), (5, 25, 240.0)])
def test_a_few_private_gaps_that_leave_p99_alone_are_info(
        tmp_path: Path, request_idx: int, at: int, ms: float) -> None:
    """One request pausing while the others stream costs the engine nothing; rare ones that
    leave p99 where it was are no warning, however long against the ITL (a healthy real vLLM
    showed two 150 ms private gaps, 20x its ITL, with p99 x1.01)."""
    diag = _diag(tmp_path, requests=40, concurrency=8, tokens=150, steps=False,
                 private={request_idx: (at, ms)})
    priv = [f for f in diag.findings if f.verdict == "private_stall"]
    assert priv and all(f.severity == "info" for f in priv)


@pytest.mark.parametrize(("step", "prefill_ms", "late_ms"), [(50, 200.0, 150.0), (83, 320.0, 90.0)])
def test_a_stream_read_late_across_a_long_prefill_step_is_the_readers(
        tmp_path: Path, step: int, prefill_ms: float, late_ms: float) -> None:
    """A long prefill step stops every stream; one of them is read `late_ms` later still,
    while the others already stream again. The shared pause is the prefill's; the private
    remainder is the reader's (the step log records no preemption), not a private stall
    the prefill step would explain, and the prefill is counted once."""
    diag = _diag(tmp_path, requests=24, concurrency=8, tokens=120, slow={step: prefill_ms},
                 prefill={step: 4096}, private={3: (step - 1, late_ms)})
    events = diag.context["stall_events"]
    assert events["private"] == 1 and events["by_cause"] == {"prefill": 1, "client_pause": 1}
    assert not {"private_stall", "preemption_stall"} & set(diag.verdicts())
    assert any("observer's own" in n for n in diag.notes)


@pytest.mark.parametrize(("at", "pause_ms", "tokens"), [(40, 200.0, 300), (71, 130.0, 1200)])
def test_a_host_pause_inside_a_step_that_also_prefilled_is_a_pause(
        tmp_path: Path, at: int, pause_ms: float, tokens: int) -> None:
    """Under load most steps carry some prefill (chunked prefill, arrivals): a pause in one
    of them is the host's when the run's other steps with a prefill of about that size were
    short. Peers: ten steps with that prefill at the plain step time."""
    peers = [at + 7 * k for k in range(1, 11)]
    diag = _diag(tmp_path, requests=24, concurrency=8, tokens=150, slow={at: pause_ms},
                 prefill={s: tokens for s in [at, *peers]})
    assert diag.context["stall_events"]["by_cause"] == {"engine_pause": 1}
    assert diag.verdicts() == ["engine_wide_stall"]


@pytest.mark.parametrize(("steps", "prefill_ms", "tokens"), [((30, 90, 150, 210), 180.0, 4096),
                                                             ((55, 120, 185), 95.0, 2048)])
def test_long_steps_their_prefill_explains_stay_prefill(
        tmp_path: Path, steps: tuple[int, ...], prefill_ms: float, tokens: int) -> None:
    """Every step with this much prefill takes about as long: the prefill is the cause."""
    slow = {s: prefill_ms * (1 + 0.05 * k) for k, s in enumerate(steps)}
    diag = _diag(tmp_path, requests=24, concurrency=8, tokens=150, slow=slow,
                 prefill={s: tokens for s in steps})
    causes = diag.context["stall_events"]["by_cause"]
    assert causes == {"prefill": len(steps)}, causes
    assert not {"engine_wide_stall", "periodic_engine_stall"} & set(diag.verdicts())
