"""`infbench diagnose stalls` against the reference engine with each injected cause.

Each test records a short, bounded run with `infbench run` (which starts the bundled
engine as a subprocess), then diagnoses it. Parameters differ between tests so that no
threshold is tuned to one case.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import duckdb
import pytest

from infbench.store import open_store
from infbench.store.findings import load_diagnoses
from playbooks import Diagnosis, StallOptions, diagnose_stalls
from playbooks.findings import Finding
from playbooks.stalls.findings import RANK_TIE
from tests.e2e.engine_process import launch, stop
from tests.support.host_pauses import STALL_VERDICTS, host_late_steps, hosts_stall, the_hosts

pytestmark = pytest.mark.e2e



def infbench(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "infbench", *args], capture_output=True,
                          text=True, timeout=timeout)


def record(db: Path, *args: str, engine: tuple[str, ...] = (), expect_rc: int = 0) -> None:
    eng = [f"--engine-arg={a}" for a in ("--gpu", "H100-SXM", *engine)]
    r = infbench("run", "--db", str(db), "--quiet", "--scrape-interval", "0.5", *args, *eng)
    assert r.returncode == expect_rc, r.stderr[-2000:]


def diagnose(db: Path, **opts: object) -> Diagnosis:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return diagnose_stalls(con, "last", StallOptions(**opts))  # type: ignore[arg-type]
    finally:
        con.close()


def injected(diag: Diagnosis, db: Path) -> list[str]:
    """The verdicts, less stall findings that are the host's own pauses
    (tests/support/host_pauses.py)."""
    late = host_late_steps(db)
    return [f.verdict for f in diag.sorted_findings() if not hosts_stall(f.verdict, f.scope, late)]


def finding(diag: Diagnosis, verdict: str) -> Finding:
    return next(f for f in diag.findings if f.verdict == verdict)


def evidence(diag: Diagnosis, verdict: str, name: str) -> dict[str, object]:
    return next(e.values for e in finding(diag, verdict).evidence if e.name == name)


def closed(requests: int, conc: int, inp: str, out: str) -> tuple[str, ...]:
    return ("--arrival", "closed", "--concurrency", str(conc), "--num-requests", str(requests),
            "--input-tokens", inp, "--output-tokens", out)


def poisson(requests: int, rate: float, inp: str, out: str) -> tuple[str, ...]:
    return ("--arrival", "poisson", "--rate", str(rate), "--num-requests", str(requests),
            "--input-tokens", inp, "--output-tokens", out)


# (fault, run): each period is new to the tests; runs sized for 9-18 stalls. Long prompts
# of mixed length make every few steps a prefill step several times longer than a decode
# step, so the step duration varies and a timer drifts in steps (and a step counter in
# seconds); random arrivals make the batch, so the tokens per step, vary too, so that a
# step counter drifts in tokens. Only then can a run tell the clocks apart (see the tie
# test below). A closed loop at a fixed concurrency keeps the batch, so tokens and steps
# stay one clock there: it serves the timer cases only.
PERIODIC = [
    ("every_steps=33,duration_ms=110", poisson(60, 9, "uniform:300:2500", "uniform:10:90")),
    ("every_steps=57,duration_ms=75", poisson(70, 7, "uniform:400:3000", "uniform:20:120")),
    # 150 requests, ~1,170 steps, 13 stalls: with 110 there were 10, the last with a single
    # request in flight, and a client starved by a busy neighbour could miss two more
    ("every_steps=85,duration_ms=160", poisson(150, 12, "uniform:200:2200", "uniform:15:100")),
    # 100 requests, ~28 stalls: with 60 (~17) the seconds fit's log-likelihood ratio fell
    # under the 28 that makes it significant in 2 of 7 runs beside busy neighbours (27.1;
    # the same fit with the code before the stalls-among-noise change); 52-73 in 6 runs now
    ("every_s=0.45,duration_ms=95", closed(100, 5, "uniform:300:2600", "uniform:20:70")),
    ("every_s=0.7,duration_ms=130", closed(65, 4, "uniform:500:3000", "uniform:30:80")),
    # 160 requests, ~15 stalls: with 110 (10-11 stalls of 60 ms) the fit's log-likelihood
    # ratio came out 31-42 against the 28 that makes it significant, and one run beside a
    # busy neighbour failed this case
    ("every_s=1.1,duration_ms=60", closed(160, 6, "uniform:250:2000", "uniform:40:100")),
]


@pytest.mark.parametrize(("fault", "load"), PERIODIC, ids=[f.split(",")[0] for f, _ in PERIODIC])
def test_periodic_stall_fundamental_period_in_its_own_clock(tmp_path: Path, fault: str,
                                                            load: tuple[str, ...]) -> None:
    db = tmp_path / "p.duckdb"
    record(db, *load, engine=("--fault", f"periodic-stall:{fault}"))
    diag = diagnose(db)
    assert diag.verdicts()[0] == "periodic_engine_stall", diag.verdicts()
    every, duration = (kv.split("=") for kv in fault.split(","))
    clock = "steps" if every[0] == "every_steps" else "seconds"
    own = evidence(diag, "periodic_engine_stall", f"period_{clock}")
    truth = float(every[1])
    # The fundamental, not a divisor or a multiple: within 5% (a timer fires at the first
    # step boundary after it is due, so its period is a few ms longer than every_s).
    assert abs(float(own["period"]) / truth - 1) <= 0.05, own
    assert own["significant"] is True
    # Both clocks count the same events and the same periods.
    sec = evidence(diag, "periodic_engine_stall", "period_seconds")
    steps = evidence(diag, "periodic_engine_stall", "period_steps")
    assert (sec["events_on_period"], sec["missed_periods"]) == (steps["events_on_period"],
                                                                steps["missed_periods"])
    assert int(sec["events_on_period"]) >= 8
    # The source's own clock ranks first, clearly ahead of the other two.
    top = evidence(diag, "periodic_engine_stall", "periodic_sources_ranked")
    ranked = [(k, v) for k, v in top.items() if k != "tied_with_first"]
    assert ranked[0][0] == f"1. {clock}", top
    assert all(float(v) < RANK_TIE * float(ranked[0][1]) for _, v in ranked[1:]), top
    assert top["tied_with_first"] is None, top
    assert "cannot tell" not in finding(diag, "periodic_engine_stall").summary
    wide = evidence(diag, "periodic_engine_stall", "engine_wide_stalls")
    assert float(duration[1]) <= float(wide["median_gap_ms"]) <= float(duration[1]) + 60


# Short prompts and one output length at a fixed concurrency: every step decodes the same
# batch and lasts about the same time, so "every N steps" and "every N x step time seconds"
# (and "every N x batch tokens") are nearly one clock in this run. On a quiet machine they
# tie; beside a busy neighbour the host's jitter varies the step time and the source's own
# clock can pull ahead. Either is right; a wrong clock crowned alone (what the ranking did
# before it knew each clock's resolution, and, on a busy CI host, when it took a 1 ms
# difference in the spread of 8 events for evidence) never is.
STEADY = [
    ("every_s=0.6,duration_ms=85", closed(16, 4, "uniform:60:120", "260")),
    ("every_steps=48,duration_ms=120", closed(15, 5, "uniform:40:100", "220")),
]


@pytest.mark.parametrize(("fault", "load"), STEADY, ids=[f.split(",")[0] for f, _ in STEADY])
def test_periodic_stall_at_a_steady_step_rate_never_crowns_another_clock(
        tmp_path: Path, fault: str, load: tuple[str, ...]) -> None:
    db = tmp_path / "s.duckdb"
    record(db, *load, engine=("--fault", f"periodic-stall:{fault}"))
    diag = diagnose(db)
    assert diag.verdicts()[0] == "periodic_engine_stall", diag.verdicts()
    every = fault.split(",")[0].split("=")
    clock = "steps" if every[0] == "every_steps" else "seconds"
    top = evidence(diag, "periodic_engine_stall", "periodic_sources_ranked")
    first = next(k for k in top if k.startswith("1. ")).split(". ", 1)[1]
    tied = {first, *(str(top["tied_with_first"] or "").split(", "))} - {""}
    assert clock in tied, top
    summary = finding(diag, "periodic_engine_stall").summary
    assert ("cannot tell these sources apart" in summary) == (len(tied) >= 2), summary
    own = evidence(diag, "periodic_engine_stall", f"period_{clock}")
    assert abs(float(own["period"]) / float(every[1]) - 1) <= 0.05, own


def test_periodic_stall_findings_saved_reported_exported(tmp_path: Path) -> None:
    db = tmp_path / "a.duckdb"
    record(db, *closed(24, 6, "uniform:80:200", "120"),
           engine=("--fault", "periodic-stall:every_steps=46,duration_ms=140"))
    diag = diagnose(db)
    assert diag.verdicts()[0] == "periodic_engine_stall"
    steps = evidence(diag, "periodic_engine_stall", "period_steps")
    assert abs(float(steps["period"]) - 46) <= 1
    share = evidence(diag, "periodic_engine_stall", "share_of_p99_itl")
    assert float(share["share_of_gaps_at_or_above_p99"]) >= 0.5
    assert diag.data_sources["engine_steps"]

    # The CLI keeps the findings with the run; the HTML report shows them.
    r = infbench("diagnose", "stalls", "last", "--db", str(db))
    assert r.returncode == 0, r.stderr
    page = tmp_path / "report.html"
    r = infbench("report", "last", "--db", str(db), "--html", str(page))
    assert r.returncode == 0, r.stderr
    assert "id='diagnosis'" in page.read_text() and "periodic_engine_stall" in page.read_text()

    # The same analysis from a file: export, import into a fresh store, same findings.
    out = tmp_path / "export"
    r = infbench("export", "last", "--db", str(db), "--format", "parquet", "--out", str(out))
    assert r.returncode == 0, r.stderr
    fresh = tmp_path / "fresh.duckdb"
    r = infbench("import", str(out), "--db", str(fresh))
    assert r.returncode == 0, r.stderr
    again = diagnose(fresh)
    assert again.to_dict()["findings"] == diag.to_dict()["findings"]
    # ... and the stored findings travelled with the run.
    con = open_store(fresh, read_only=True)
    (stored,) = load_diagnoses(con, diag.run_id)
    con.close()
    assert [f["verdict"] for f in stored.findings] == diag.verdicts()


def test_hung_engine_is_engine_stopped_with_stranded_requests_and_last_step(tmp_path: Path) -> None:
    db = tmp_path / "h.duckdb"
    # 4 slots, 100 tokens each: the first wave finishes by step ~101, the second hangs
    # before step 170; its 4 requests time out after 3 s and the 4 sent then do too.
    record(db, *closed(12, 4, "uniform:60:120", "100"), "--timeout", "3",
           engine=("--fault", "hang:at_step=170"), expect_rc=1)
    con = duckdb.connect(str(db), read_only=True)
    status = con.execute("SELECT status FROM runs").fetchone()
    con.close()
    assert status == ("completed_with_errors",)
    r = infbench("diagnose", "stalls", "last", "--db", str(db), "--json")
    assert r.returncode == 0, r.stderr
    diag = Diagnosis.from_dict(json.loads(r.stdout))
    assert diag.verdicts()[0] == "engine_stopped"
    f = diag.sorted_findings()[0]
    assert f.severity == "critical"
    stranded = evidence(diag, "engine_stopped", "stranded_requests")
    assert (stranded["stranded"], stranded["in_flight_at_stop"], stranded["sent_after_stop"]) == (8, 4, 4)
    assert stranded["timed_out"] == 8 and stranded["completed_requests"] == 4
    engine = evidence(diag, "engine_stopped", "engine_after_stop")
    assert engine["source"] == "engine_steps" and engine["last_step_id"] == 169
    assert engine["steps_after_stop"] == 0
    assert engine["confirmed_by_engine_counters"] is True  # /metrics: running, no new tokens
    # The clients' last token came with the engine's last step.
    assert abs(float(stranded["stopped_at_s"]) - float(engine["last_step_end_s"])) <= 0.05
    assert "infbench diagnose hang" in f.next_actions[0]
    assert all(e.sql for e in f.evidence)


def test_small_kv_pool_private_stalls_attributed_to_preemption(tmp_path: Path) -> None:
    db = tmp_path / "k.duckdb"
    record(db, *closed(36, 12, "uniform:200:400", "300"), engine=("--num-gpu-blocks", "150"))
    diag = diagnose(db)
    assert "preemption_stall" in diag.verdicts()
    assert "periodic_engine_stall" not in diag.verdicts()
    priv = evidence(diag, "preemption_stall", "private_stalls")
    assert int(priv["events_with_preemption_in_step_log"]) >= 1
    assert float(priv["median_requests_progressing_meanwhile"]) >= 1
    cross = evidence(diag, "preemption_stall", "cross_request_test")
    assert int(cross["private"]) > int(cross["engine_wide"])


def test_long_prompts_among_decoders_prefill_interference_and_lockout(tmp_path: Path) -> None:
    trace = tmp_path / "trace.csv"
    rows = [(round(i * 0.1, 3), 120, 160) for i in range(36)] + [(1.0, 16000, 20), (2.3, 9000, 20)]
    with trace.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["timestamp", "input_tokens", "output_tokens"])
        w.writerows(sorted(rows))
    db = tmp_path / "p.duckdb"
    record(db, "--workload", "trace", "--trace", str(trace),
           engine=("--max-num-batched-tokens", "2048", "--max-model-len", "20000"))
    diag = diagnose(db, itl_target_ms=30.0)
    assert "prefill_interference" in diag.verdicts()
    assert not STALL_VERDICTS & set(injected(diag, db))
    during = evidence(diag, "prefill_interference", "itl_during_long_prefills")
    assert float(during["elevation"]) >= 3
    locked = evidence(diag, "prefill_interference", "arrivals_locked_out")
    assert float(locked["max_wait_for_first_token_ms"]) > 3 * float(locked["baseline_ttft_ms"])
    budget = evidence(diag, "prefill_interference", "roofline_token_budget")
    assert 0 < int(budget["budget_tokens"]) < 2048  # a 30 ms target needs less than the 2048 in use
    long = evidence(diag, "prefill_interference", "long_prompts")
    assert int(long["longest_prompt_tokens"]) > 5000


def test_slow_device_is_uniform_slowdown_not_a_stall(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    record(db, *closed(24, 8, "uniform:100:200", "100"), engine=("--fault", "slow-device:factor=2.5"))
    diag = diagnose(db)
    assert injected(diag, db) == ["uniform_slowdown"]
    ratio = float(evidence(diag, "uniform_slowdown", "decode_step_vs_roofline")["ratio"])
    assert 2.0 <= ratio <= 3.2


@pytest.mark.parametrize(("after_s", "pause_s"), [(0.8, 0.30), (1.6, 0.24)])
def test_a_host_that_stops_the_engine_once_is_found_and_marked_host_late(
        tmp_path: Path, after_s: float, pause_s: float) -> None:
    """The truth `injected()` leans on: the host stops a healthy engine's process once
    (SIGSTOP, SIGCONT `pause_s` later); the playbook finds that engine-wide pause, rates one
    irregular pause info (damage.py: how often could it recur), and the engine's step log
    marks the step it lay in host-late."""
    eng = launch([sys.executable, "-m", "reference_engine", "--port", "0", "--gpu", "H100-SXM"])
    stops: list[float] = []

    def pause_once() -> None:
        # Into the run: the preflight's lone request steps first, and on a busy host the
        # run's closed loop may start seconds later; its batch is what says it has begun.
        deadline = time.monotonic() + 60
        while not any(s["num_running"] >= 4 for s in
                      json.loads(eng.request("GET", "/engine/steps?after=-1")[2])["steps"]):
            if time.monotonic() > deadline:
                return
            time.sleep(0.05)
        time.sleep(after_s)
        os.kill(eng.proc.pid, signal.SIGSTOP)
        stopped = time.monotonic()
        try:
            time.sleep(pause_s)
        finally:
            # how long it stayed stopped at least: on a saturated host this thread itself wakes
            # late (round R41: asked 0.30 s, the client's longest gap 568 ms)
            stops.append(time.monotonic() - stopped)
            os.kill(eng.proc.pid, signal.SIGCONT)

    db = tmp_path / "h.duckdb"
    try:
        pauser = threading.Thread(target=pause_once, daemon=True)
        pauser.start()
        r = infbench("run", "--url", eng.url, "--db", str(db), "--quiet", "--scrape-interval", "0.5",
                     *closed(48, 8, "uniform:100:200", "uniform:120:180"))
        pauser.join(timeout=70)
    finally:
        stop(eng)
    assert r.returncode == 0, r.stderr[-2000:]
    assert stops, "the run ended before the host paused the engine"
    diag = diagnose(db)
    wide = [f for f in diag.findings if f.verdict == "engine_wide_stall"]
    assert wide, diag.verdicts()
    assert the_hosts(wide[0].scope.get("windows_s"), host_late_steps(db))
    gap = float(evidence(diag, "engine_wide_stall", "engine_wide_stalls")["max_gap_ms"])
    assert stops[0] >= pause_s
    # The stop is at least what the pauser measured; after SIGCONT a saturated host may run
    # the engine later still (round R53 beside a busy neighbour: stopped 240 ms, the longest
    # gap 403 ms). The engine's step log has the whole pause the host made: the host-late
    # step the stop lay in lasted from before the stop until the engine ran again.
    host_ms = max((e - s for s, e in host_late_steps(db)), default=0.0) * 1e3
    assert stops[0] * 1e3 <= gap <= max(stops[0] * 1e3, host_ms) + 150, (gap, stops[0], host_ms)
    if int(evidence(diag, "engine_wide_stall", "engine_wide_stalls")["events"]) == 1:
        assert wide[0].severity == "info"
    assert injected(diag, db) == []


def test_clean_run_has_no_findings_and_cli_says_so(tmp_path: Path) -> None:
    db = tmp_path / "c.duckdb"
    record(db, *closed(30, 8, "uniform:100:250", "uniform:60:140"))
    r = infbench("diagnose", "stalls", "last", "--db", str(db), "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    # engine_stopped included: a run that ended is not a hang
    assert injected(Diagnosis.from_dict(out), db) == []
    assert out["data_sources"]["engine_steps"] is True
    if not out["findings"]:  # else the host paused the engine, and the playbook said so
        text = infbench("diagnose", "stalls", "last", "--db", str(db))
        assert "No findings" in text.stdout
    # The run recorded the engine's own resolved settings, so the playbook knows the GPU
    # without being told.
    con = duckdb.connect(str(db), read_only=True)
    config = json.loads(con.execute("SELECT config FROM runs").fetchone()[0])
    con.close()
    assert config["engine_config"]["gpu"]["value"] == "H100-SXM"
    assert config["engine_config"]["model"]["value"] == "meta-llama/Llama-3.1-8B"


def test_unknown_run_is_a_one_line_error(tmp_path: Path) -> None:
    db = tmp_path / "e.duckdb"
    open_store(db).close()
    r = infbench("diagnose", "stalls", "nope", "--db", str(db))
    assert r.returncode == 2
    assert "no such run" in r.stderr and len(r.stderr.strip().splitlines()) == 1
