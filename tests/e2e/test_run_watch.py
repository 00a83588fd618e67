"""The live watch of `infbench run` on the bundled engine: an injected incident is noticed
while the load runs and its evidence captured then; a healthy run and a short stall raise
nothing; `--no-watch` turns it off. (Fleet departures: tests/e2e/test_diagnose_replicas.py;
the triage reading the captures: tests/e2e/test_diagnose_triage.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli import closed_loop, infbench
from tests.support.store_rows import store_rows

pytestmark = pytest.mark.e2e


def _run(db: Path, *args: str, engine: tuple[str, ...] = (), rc: tuple[int, ...] = (0,)) -> dict:
    eng = [f"--engine-arg={a}" for a in ("--gpu", "H100-SXM", *engine)]
    r = infbench("run", "--db", str(db), "--quiet", "--json", *args, *eng, timeout=180)
    assert r.returncode in rc, r.stdout[-2000:] + r.stderr[-2000:]
    return json.loads(r.stdout)


@pytest.mark.parametrize(("at_step", "stall_s", "timeout_s"), [(90, "0.6", "3"), (200, "1.5", "5")])
def test_a_frozen_engine_is_captured_during_the_stop(tmp_path: Path, at_step: int, stall_s: str,
                                                     timeout_s: str) -> None:
    db = tmp_path / "h.duckdb"
    summary = _run(db, *closed_loop(12, 4, "uniform:40:120", "80"), "--timeout", timeout_s,
                   "--watch-stall", stall_s, engine=("--fault", f"hang:at_step={at_step}"), rc=(1,))
    # The stop first; the stranded requests' timeouts may make an error burst after it.
    w, *later = summary["watch"]
    assert [x["kind"] for x in later] in ([], ["error_burst"]), summary["watch"]
    assert w["kind"] == "engine_stopped" and w["captured"] == ["stacks", "/metrics"], w
    assert w["failed"] == [] and w["hang_capture_id"], w
    # Noticed after the threshold of silence, before the stranded requests timed out.
    ((t_s, last_step_end, detail),) = store_rows(db, "SELECT w.t_s, (SELECT max(end_s) - r.t0_monotonic_ns / 1e9 FROM "
                                            "engine_steps), w.detail FROM watch_triggers w, runs r "
                                            "WHERE w.seq = 0")
    silent = json.loads(detail)["silent_s"]
    assert float(stall_s) <= silent < float(stall_s) + 0.5, detail
    assert last_step_end + float(stall_s) <= t_s + 0.05 < last_step_end + float(timeout_s), (t_s, last_step_end)
    # The capture: the engine's threads, its step loop inside the hang, and its /metrics.
    frames = store_rows(db, "SELECT thread_name, function FROM hang_stacks JOIN watch_triggers "
                       "ON capture_id = hang_capture_id WHERE seq = 0")
    assert ("engine-step-loop", "Engine._hang") in frames, frames
    ((body,),) = store_rows(db, "SELECT body FROM watch_metrics WHERE trigger_id LIKE '%-w0'")
    assert "vllm:num_requests_running" in body


# Per trigger: the silence it measured, the content chunks the client stored inside it, and
# (for the failure message) the engine's own steps that ended inside it.
SILENCE_SQL = """
WITH w AS (
  SELECT w.run_id, w.kind, w.detail, w.t_s AS to_s,
         (CAST(json_extract(w.detail, '$.last_byte_ns') AS BIGINT) - r.t0_monotonic_ns) / 1e9 AS from_s,
         r.t0_monotonic_ns / 1e9 AS t0_s
  FROM watch_triggers w JOIN runs r USING (run_id)
)
SELECT w.kind, w.detail, w.to_s - w.from_s,
       (SELECT count(*) FROM chunks c WHERE c.run_id = w.run_id AND c.content AND c.t_ns / 1e9 > w.from_s + 0.001
          AND c.t_ns / 1e9 < w.to_s) AS chunks_inside,
       (SELECT count(*) FROM engine_steps s WHERE s.run_id = w.run_id AND s.end_s - w.t0_s > w.from_s + 0.05
          AND s.end_s - w.t0_s < w.to_s - 0.05) AS steps_inside
FROM w
"""


def test_a_short_periodic_stall_and_a_healthy_run_raise_nothing(tmp_path: Path) -> None:
    db = tmp_path / "p.duckdb"
    summary = _run(db, *closed_loop(40, 5, "uniform:100:400", "uniform:30:90"),
                   engine=("--fault", "periodic-stall:every_s=0.55,duration_ms=140"))
    # The 140 ms stalls never make the second without a byte the watch waits for. Beside a busy
    # neighbour the host itself once held every stream that long (round R68): the watch was then
    # right, and the client's own chunks must show the whole silence it measured.
    triggers = store_rows(db, SILENCE_SQL)
    assert ("watch" in summary) == bool(triggers), (summary.get("watch"), triggers)
    for kind, detail, silent_s, chunks_inside, steps_inside in triggers:
        assert kind == "engine_stopped" and silent_s >= 1.0 and chunks_inside == 0, (
            kind, detail, silent_s, chunks_inside, steps_inside)


def test_an_error_burst_is_noticed_and_no_watch_means_none(tmp_path: Path) -> None:
    db = tmp_path / "x.duckdb"
    # The device is lost 1.2 s after the engine started: every request in flight and after it
    # fails, within a few tens of ms at the run's end (the watch's last look, after the last
    # streams are parsed, sees them). A run that gave up on a target that stopped answering
    # (exit 1, interrupted) saw the same burst.
    summary = _run(db, *closed_loop(60, 3, "uniform:40:90", "60"), "--max-error-rate", "1",
                   engine=("--fault", "xid:code=79,at_s=1.2"), rc=(0, 1))
    kinds = [w["kind"] for w in summary.get("watch", [])]
    assert "error_burst" in kinds, summary.get("watch")
    burst = next(w for w in summary["watch"] if w["kind"] == "error_burst")
    ((first_error_s, errors),) = store_rows(db, "SELECT min(end_ns) / 1e9, count(*) FROM requests "
                                           "WHERE error_class IS NOT NULL")
    assert errors >= 5 and first_error_s <= burst["t_s"], (first_error_s, burst)
    assert "/metrics" in burst["captured"], burst
    db2 = tmp_path / "y.duckdb"
    summary = _run(db2, *closed_loop(60, 3, "uniform:40:90", "60"), "--max-error-rate", "1",
                   "--no-watch", engine=("--fault", "xid:code=79,at_s=1.2"), rc=(0, 1))
    assert "watch" not in summary and store_rows(db2, "SELECT count(*) FROM watch_triggers") == [(0,)]


def test_watch_flags_are_checked_before_anything_is_sent(tmp_path: Path) -> None:
    db = tmp_path / "bad.duckdb"
    for args, words in ((["--watch-stall", "0"], "watch-stall"), (["--watch-captures", "-1"], "watch-captures"),
                        (["--engine-pid", "0"], "engine-pid")):
        r = infbench("run", "--db", str(db), "--num-requests", "2", *args, timeout=60)
        assert r.returncode == 2 and words in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert not db.exists()
