"""The `engine_stopped` verdict on synthetic timelines (tests/support/synthetic_runs.py): a hung
engine is a critical finding; a clean run, a run that simply ended, and a run where one
request failed are not."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from playbooks import Diagnosis, diagnose_stalls
from playbooks.findings import Finding
from tests.support.stores import new_store
from tests.support.synthetic_runs import write_timeline


def _diag(tmp_path: Path, **kw: object) -> tuple[Diagnosis, duckdb.DuckDBPyConnection]:
    con = new_store(tmp_path / "s.duckdb")
    write_timeline(con, **kw)  # type: ignore[arg-type]
    return diagnose_stalls(con, "last"), con


def _stopped(diag: Diagnosis) -> Finding | None:
    return next((f for f in diag.findings if f.verdict == "engine_stopped"), None)


@pytest.mark.parametrize(("hang_at", "conc", "steps", "metrics"), [
    (130, 6, True, 0.0), (275, 4, False, 0.0), (60, 8, False, 0.4), (305, 5, True, 0.7)])
def test_hung_engine_is_critical_with_when_how_many_and_last_step(
        tmp_path: Path, hang_at: int, conc: int, steps: bool, metrics: float) -> None:
    tokens, timeout = 80, 2.5
    diag, con = _diag(tmp_path, requests=4 * conc, concurrency=conc, tokens=tokens,
                      hang_at_step=hang_at, timeout_s=timeout, steps=steps, metrics_every_s=metrics)
    f = _stopped(diag)
    assert f is not None and f.severity == "critical"
    assert diag.sorted_findings()[0] is f
    ev = {e.name: e for e in f.evidence}
    v = ev["stranded_requests"].values
    # Synthetic step i ends at 6 ms * (i + 1) (+ request_idx us of read offset), and step
    # hang_at - 1 was the last to run.
    assert v["stopped_at_s"] == pytest.approx(0.006 * hang_at, abs=0.001)
    wave = (hang_at - 1) // tokens          # the wave that was streaming when it hung
    assert v["in_flight_at_stop"] == conc
    assert v["sent_after_stop"] == (4 - wave - 1) * conc
    assert v["stranded"] == v["timed_out"] == (4 - wave) * conc
    assert v["completed_requests"] == wave * conc
    last = ev["engine_after_stop"].values
    if steps:
        assert (last["source"], last["last_step_id"]) == ("engine_steps", hang_at - 1)
        assert last["steps_after_stop"] == 0
    elif metrics:
        assert last["source"] == "metric_samples"
        assert abs(float(last["generation_last_moved_s"]) - v["stopped_at_s"]) <= metrics + 0.01
    else:
        assert last["source"] == "chunks"
    assert last["confirmed_by_engine_counters"] is bool(metrics)
    assert "infbench diagnose hang" in f.next_actions[0]
    assert any("py-spy dump" in a for a in f.next_actions)
    assert any("Flight Recorder" in a for a in f.next_actions)
    # The evidence SQL is what produced the numbers: rerun it and get them again.
    rerun = con.execute(ev["stranded_requests"].sql).fetchone()
    assert rerun is not None and rerun[3] == v["stranded"]
    con.close()


def test_one_stranded_request_needs_the_engine_counters_to_confirm(tmp_path: Path) -> None:
    # Concurrency 1, the engine hangs in the last request: one request stranded. With
    # /metrics (running 1, generation flat) that is a hang; from the client alone it is
    # indistinguishable from one request failing, and nothing is said.
    hung = dict(requests=4, concurrency=1, tokens=80, hang_at_step=290, timeout_s=2.0)
    diag, con = _diag(tmp_path, **hung, metrics_every_s=0.5)
    con.close()
    f = _stopped(diag)
    assert f is not None
    values = {e.name: e.values for e in f.evidence}
    assert values["stranded_requests"]["stranded"] == 1
    assert values["engine_after_stop"]["confirmed_by_engine_counters"] is True
    (tmp_path / "s.duckdb").unlink()
    diag, con = _diag(tmp_path, **hung)
    con.close()
    assert _stopped(diag) is None


@pytest.mark.parametrize("kw", [
    {},                                                       # clean, ends with a cool-down
    {"metrics_every_s": 0.3},
    {"fail": {3: (30, "timeout", 3.0)}},                      # one request times out mid-run
    {"fail": {23: (30, "timeout", 3.0)}, "metrics_every_s": 0.5},  # ... in the last wave
    {"fail": {23: (79, "truncated_sse", 2.0)}},              # cut off at its last token
    {"fail": {20: (5, "http_500", 0.0), 21: (0, "http_500", 0.0)}},
    # the run was interrupted right after a token: every in-flight request cancelled at once
    {"fail": {r: (50, "cancelled", 0.004) for r in range(18, 24)}},
])
def test_no_engine_stopped_on_healthy_ends_and_single_failures(tmp_path: Path, kw: dict) -> None:
    diag, con = _diag(tmp_path, requests=24, concurrency=6, tokens=80, **kw)
    con.close()
    assert _stopped(diag) is None, diag.verdicts()


def test_interrupted_after_a_long_silence_is_a_hang(tmp_path: Path) -> None:
    # The user waited 8 s with no token at all, then pressed Ctrl-C: cancelled, stranded.
    diag, con = _diag(tmp_path, requests=24, concurrency=6, tokens=80,
                      fail={r: (50, "cancelled", 8.0) for r in range(18, 24)})
    con.close()
    f = _stopped(diag)
    assert f is not None
    v = next(e.values for e in f.evidence if e.name == "stranded_requests")
    assert (v["stranded"], v["cancelled"], v["in_flight_at_stop"]) == (6, 6, 6)


def test_engine_that_never_produced_a_token(tmp_path: Path) -> None:
    diag, con = _diag(tmp_path, requests=6, concurrency=3, tokens=50, hang_at_step=1,
                      timeout_s=1.5)
    con.close()
    f = _stopped(diag)
    assert f is not None and "before its first token" in f.summary
    v = next(e.values for e in f.evidence if e.name == "stranded_requests")
    assert v["never_got_a_token"] == v["stranded"] == 6
    assert any("No inter-token gaps" in n for n in diag.notes)
