"""`--workers N`: the same run as one process, split across worker processes on this host.

Against the deterministic server (tests/support/sse_server.py: every request streams exactly
max_tokens events on a fixed schedule, and logs when it wrote each), a run with two or three
workers must store the same requests (index, lengths, tokens, conversation and turn) as one
process with the same seed, and its latencies must pass the single-process accuracy checks of
tests/e2e/test_run_timing.py against the server's own send log. A worker killed mid-run
(SIGKILL: no goodbye) marks the run with its loss; what it shipped and the other workers'
requests are stored whole.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from infbench.loadgen.arrivals import Arrivals
from infbench.loadgen.preflight import preflight
from infbench.loadgen.run.execute import RunResult, execute_run
from infbench.loadgen.run.runner import RunSettings
from infbench.loadgen.workers.coordinator import Coordinator
from infbench.loadgen.workers.scale import Scale
from infbench.loadgen.workloads import Synthetic
from infbench.loadgen.workloads.build import build_workload
from infbench.loadgen.workloads.lengths import LengthDist
from infbench.store import open_store
from tests.e2e.test_run_timing import Case, _check, _get
from tests.support.cli import ROOT, cli_env
from tests.support.process import sse_server

pytestmark = pytest.mark.e2e

_IDENTITY = ("SELECT request_idx, conversation_id, turn, target_input_tokens, prompt_tokens, max_tokens, "
             "output_tokens, num_content_chunks, error_class FROM requests ORDER BY request_idx")


class CapturingScale(Scale):
    """A Scale that keeps the coordinator it made, so a test can reach a worker mid-run."""

    made: list[Coordinator]

    def coordinator(self, *args: Any, **kwargs: Any) -> Coordinator:
        coord = super().coordinator(*args, **kwargs)
        self.made.append(coord)
        return coord


def _scale(workers: int) -> CapturingScale:
    s = CapturingScale(workers=workers)
    object.__setattr__(s, "made", [])
    return s


def _rows(db: Path) -> list[tuple[Any, ...]]:
    con = open_store(db, read_only=True)
    try:
        return con.execute(_IDENTITY).fetchall()
    finally:
        con.close()


def test_two_workers_store_what_one_process_stores_with_its_timing(tmp_path: Path) -> None:
    """Closed loop, 48 slots (24 per worker): same requests and tokens, and every timing check
    of the single-process test against the server's write log."""
    case = Case(48, 30.0, 12.0, 14)
    flags = ["--ttft-ms", str(case.ttft_ms), "--itl-ms", str(case.itl_ms), "--log-timing"]
    results: dict[int, RunResult] = {}
    with sse_server(*flags, nice=5) as url:
        target = asyncio.run(preflight(url, "completions", None, None))
        for n in (1, 2):
            settings = RunSettings(url=target.url, endpoint="completions", model=target.model,
                                   arrivals=Arrivals("closed", concurrency=case.streams),
                                   num_requests=case.streams * 2, seed=11, prompt_salt=None,
                                   sample_interval_s=0.2)
            wl = Synthetic(LengthDist.parse("uniform:40:90", "in"), LengthDist.parse(str(case.tokens), "out"),
                           target.tokens)
            config = {"arrivals": {"kind": "closed", "concurrency": case.streams}}  # as the CLI stores it
            results[n] = execute_run(settings, wl, tmp_path / f"w{n}.duckdb", config, scale=_scale(n))
        logs = {name: _get(f"{url}/_{name}") for name in ("log", "arrivals", "tail")}
    for n, r in results.items():
        assert r.status.status == "completed" and r.summary["completed"] == case.streams * 2, (n, r.summary["errors"])
    one, two = _rows(tmp_path / "w1.duckdb"), _rows(tmp_path / "w2.duckdb")
    assert one == two and len(one) == case.streams * 2
    # The gate pairs the two runs request by request: the same workload, by its fingerprint.
    assert results[1].summary["workload_fingerprint"] == results[2].summary["workload_fingerprint"]
    w = results[2].summary["workers"]
    assert [p["stored_requests"] for p in w["per_worker"]] == [case.streams, case.streams]
    assert all(p["clock_shared"] and abs(p["clock_offset_ns"]) <= p["clock_uncertainty_ns"] for p in w["per_worker"])
    # The server logs every request of both runs by its x-request-id; each run's check reads its own.
    for n in (1, 2):
        try:
            _check(case, results[n].summary, logs, tmp_path / f"w{n}.duckdb")
        except AssertionError as exc:
            raise AssertionError(f"workers={n}: {exc}") from None
    con = open_store(tmp_path / "w2.duckdb", read_only=True)
    try:  # both workers sampled their own health, and the samples say which is which
        workers = {r[0] for r in con.execute("SELECT DISTINCT worker FROM client_samples").fetchall()}
    finally:
        con.close()
    assert workers == {0, 1}, workers


def test_conversations_stay_on_one_worker_and_match_one_process(tmp_path: Path) -> None:
    """Open loop (Poisson, 12/s, capped at 6 in flight) of 3-turn conversations over three
    workers: each conversation's turns on one worker, the same turns, lengths and tokens."""
    fingerprints: set[str] = set()
    with sse_server("--ttft-ms", "8", "--itl-ms", "3") as url:
        target = asyncio.run(preflight(url, "chat", None, None))
        for n in (1, 3):
            wl = build_workload("multiturn", input_len=LengthDist.parse("uniform:20:60", "in"),
                                output_len=LengthDist.parse("uniform:3:9", "out"), target=target,
                                prefix_groups=1, prefix_tokens=1, turns=3, dataset=None, trace=None,
                                time_scale=1.0, trace_start=0.0, trace_end=None)
            settings = RunSettings(url=target.url, endpoint="chat", model=target.model,
                                   arrivals=Arrivals("poisson", rate=12.0, concurrency=6),
                                   num_requests=36, seed=5, prompt_salt=None)
            r = execute_run(settings, wl, tmp_path / f"m{n}.duckdb", {"workers": n}, scale=_scale(n))
            assert r.status.status == "completed" and r.summary["completed"] == 36, r.summary["errors"]
            fingerprints.add(r.summary["workload_fingerprint"])

    def by_turn(db: Path) -> list[tuple[Any, ...]]:
        con = open_store(db, read_only=True)
        try:
            return con.execute("SELECT conversation_id, turn, prompt_tokens, max_tokens, output_tokens, "
                               "intended_send_ns IS NOT NULL FROM requests ORDER BY 1, 2").fetchall()
        finally:
            con.close()

    assert by_turn(tmp_path / "m1.duckdb") == by_turn(tmp_path / "m3.duckdb")
    assert len(fingerprints) == 1  # same schedule (intended first-turn times) and lengths
    con = open_store(tmp_path / "m3.duckdb", read_only=True)
    try:
        split = con.execute("SELECT conversation_id, count(DISTINCT worker) FROM requests GROUP BY 1 "
                            "HAVING count(DISTINCT worker) > 1").fetchall()
        per_worker = con.execute("SELECT worker, count(*) FROM requests GROUP BY 1 ORDER BY 1").fetchall()
        # The first turn of conversation k is due at the open loop's k-th arrival, on the shared t0.
        firsts = [r[0] for r in con.execute(
            "SELECT intended_send_ns FROM requests WHERE turn = 0 ORDER BY conversation_id").fetchall()]
    finally:
        con.close()
    assert split == [] and [c for _, c in per_worker] == [12, 12, 12]
    assert firsts == sorted(firsts)


def test_a_worker_killed_mid_run_marks_the_run_and_keeps_the_rest(tmp_path: Path) -> None:
    """Three workers, a constant 30/s for 90 requests; worker 1's process is SIGKILLed after its
    third send. The run is interrupted with a reason naming worker 1 and its loss; workers 0 and
    2 stored their whole share; every stored request has all its chunks."""
    scale = _scale(3)
    killed: list[int] = []

    def killer() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if scale.made:
                st = scale.made[0].workers[1]
                if st.progress.get("sent", 0) >= 3 and st.info.get("pid"):
                    os.kill(st.info["pid"], signal.SIGKILL)
                    killed.append(st.info["pid"])
                    return
            time.sleep(0.02)

    with sse_server("--ttft-ms", "15", "--itl-ms", "4") as url:
        target = asyncio.run(preflight(url, "completions", None, None))
        settings = RunSettings(url=target.url, endpoint="completions", model=target.model,
                               arrivals=Arrivals("constant", rate=30.0), num_requests=90, seed=2)
        wl = Synthetic(LengthDist.parse("64", "in"), LengthDist.parse("uniform:5:20", "out"), target.tokens)
        thread = threading.Thread(target=killer, daemon=True)
        thread.start()
        r = execute_run(settings, wl, tmp_path / "k.duckdb", {"workers": 3}, scale=scale)
        thread.join()
    assert killed, "worker 1 never got to its third request"
    assert r.status.status == "interrupted"
    assert "worker 1" in (r.status.reason or "") and "died" in r.status.reason and "killed by SIGKILL" in r.status.reason
    con = open_store(tmp_path / "k.duckdb", read_only=True)
    try:
        w = {row[0]: row[1:] for row in con.execute(
            "SELECT worker, status, planned_requests, stored_requests, lost_requests FROM run_workers "
            "WHERE run_id = ? ORDER BY worker", [r.run_id]).fetchall()}
        stored = dict(con.execute("SELECT worker, count(*) FROM requests GROUP BY 1").fetchall())
        partial = con.execute(
            "SELECT count(*) FROM requests r LEFT JOIN (SELECT request_idx, count(*) FILTER (WHERE content) AS n "
            "FROM chunks GROUP BY 1) c USING (request_idx) WHERE r.error_class IS NULL "
            "AND coalesce(c.n, 0) <> r.num_content_chunks").fetchone()[0]
        orphans = con.execute("SELECT count(*) FROM chunks WHERE request_idx NOT IN "
                              "(SELECT request_idx FROM requests)").fetchone()[0]
        status_reason = con.execute("SELECT status, status_reason FROM runs").fetchone()
    finally:
        con.close()
    assert w[0] == ("completed", 30, 30, 0) and w[2] == ("completed", 30, 30, 0), w
    status, planned, kept, lost = w[1]
    assert status == "died" and planned == 30 and kept == stored.get(1, 0) and lost == planned - kept > 0, w
    assert stored[0] == 30 and stored[2] == 30
    assert partial == 0 and orphans == 0
    assert status_reason[0] == "interrupted" and f"{lost}" in status_reason[1]
    assert any("worker 1" in x for x in r.summary["warnings"])
    for pid in killed:  # the killed process was reaped, not left a zombie of ours
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def _group_alive(pgid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(stat[2]) == pgid and stat[0] != "Z":
                out.append(int(entry))
    return out


def test_ctrl_c_stops_every_worker_and_keeps_what_they_sent(tmp_path: Path) -> None:
    """`infbench run --workers 2` in its own process group, Ctrl-C'd (SIGINT to the group, as a
    terminal sends it) once the server has seen 12 requests: exit 130, the run interrupted with
    what was received stored, and no process of the group left."""
    db = tmp_path / "int.duckdb"
    with sse_server("--ttft-ms", "20", "--itl-ms", "10", "--log-timing") as url:
        proc = subprocess.Popen(
            [sys.executable, "-m", "infbench", "run", "--url", url, "--workers", "2", "--arrival", "constant",
             "--rate", "20", "--duration", "60", "--input-tokens", "32", "--output-tokens", "40",
             "--db", str(db), "--quiet"],
            cwd=ROOT, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            start_new_session=True)
        try:
            deadline = time.monotonic() + 60
            while len(_get(f"{url}/_arrivals")) < 12 and time.monotonic() < deadline:
                time.sleep(0.1)
            os.killpg(proc.pid, signal.SIGINT)
            _, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    assert proc.returncode == 130, err[-2000:]
    assert "Traceback" not in err
    time.sleep(0.5)
    assert _group_alive(proc.pid) == []
    con = open_store(db, read_only=True)
    try:
        status = con.execute("SELECT status FROM runs").fetchone()[0]
        stored = con.execute("SELECT count(*), count(DISTINCT worker) FROM requests").fetchone()
        workers = con.execute("SELECT count(*) FROM run_workers").fetchone()[0]
    finally:
        con.close()
    assert status == "interrupted" and stored[0] >= 12 and stored[1] == 2 and workers == 2


@pytest.mark.parametrize(("extra", "message"), [
    (["--workers", "2", "--metrics-port", "0"], "error: workers: --metrics-port (the live exposition is one process's)"),
    (["--workers", "2", "--url", "http://127.0.0.1:2"], "error: workers: --metrics-port"),
    (["--workers", "3", "--arrival", "closed", "--concurrency", "2"],
     "error: workers: --concurrency 2 (slots) cannot be split across 3 workers"),
    (["--ray", "127.0.0.1:9"], "error: ray: nothing answers at 127.0.0.1:9"),
    (["--workers", "0"], "error: workers: must be >= 1, not 0"),
])
def test_what_workers_cannot_do_is_refused_in_one_line(tmp_path: Path, extra: list[str], message: str) -> None:
    """Before anything is sent: one line naming what was wrong, exit 2, no traceback."""
    with sse_server() as url:
        r = subprocess.run([sys.executable, "-m", "infbench", "run", "--url", url, "--num-requests", "4",
                            "--db", str(tmp_path / "x.duckdb"), *extra], cwd=ROOT, env=cli_env(),
                           capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.startswith(message), r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
