"""`infbench diagnose RUN` on the bundled engine with a known, injected cause: the headline names
it (with its share of the tail), every playbook that could run did, what the run lacked is
listed, and a healthy run says "no problem found" with exit 0. Each fault's parameters are
used by no other test."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from tests.e2e.engine_process import running_engine
from tests.support.cli import closed_loop, infbench, triage
from tests.support.host_pauses import STALL_VERDICTS as HOST_STALLS
from tests.support.host_pauses import host_late_steps, hosts_stall

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]


def _run(db: Path, *args: str, engine: tuple[str, ...] = (), url: str | None = None,
         expect_rc: int = 0) -> None:
    target = ["--url", url] if url else [f"--engine-arg={a}" for a in ("--gpu", "H100-SXM", *engine)]
    r = infbench("run", "--db", str(db), "--quiet", "--scrape-interval", "0.25", *target, *args, timeout=240)
    assert r.returncode == expect_rc, r.stderr[-2000:]


def _head(doc: dict) -> dict:
    return doc["context"]["headline"]


def test_periodic_stall_is_the_headline_with_its_share_of_the_tail(tmp_path: Path) -> None:
    db = tmp_path / "p.duckdb"
    _run(db, *closed_loop(90, 5, "uniform:300:2400", "uniform:25:80"),
         engine=("--fault", "periodic-stall:every_s=0.8,duration_ms=120"))
    rc, doc = triage(db)
    head = _head(doc)
    assert rc == 1 and head["verdict"] in ("periodic_engine_stall", "engine_wide_stall"), head
    assert head["playbook"] == "stalls" and head["damage"]["itl_p99_share"] >= 0.5, head
    assert "stalls" in doc["context"]["playbooks_run"] and "mbu" in doc["context"]["playbooks_run"]
    # the bundled engine serves a step log: nothing says one is missing
    assert all(m["source"] != "engine_steps" for m in doc["context"]["missing_data"])


def test_hung_engine_is_engine_stopped_with_the_stacks_the_live_watch_took(tmp_path: Path) -> None:
    db = tmp_path / "hw.duckdb"
    _run(db, *closed_loop(14, 5, "uniform:50:110", "70"), "--timeout", "4",
         engine=("--fault", "hang:at_step=120"), expect_rc=1)
    rc, doc = triage(db)
    head = _head(doc)
    assert rc == 1 and head["verdict"] == "engine_stopped", head
    # One command: the capture taken during the stop is linked, so the hang playbook ran and
    # the stop names where the engine's step thread was.
    assert "hang" in doc["context"]["playbooks_run"], doc["context"]["playbooks_run"]
    assert all(m["source"] != "hang_captures" for m in doc["context"]["missing_data"])
    stopped = next(f for f in doc["findings"] if f["verdict"] == "engine_stopped")
    assert "The live watch captured the engine's stacks" in stopped["summary"], stopped["summary"]
    stacks = next(e["values"] for e in stopped["evidence"] if e["name"] == "stacks_during_stop")
    assert any(k.startswith("engine-step-loop") and "Engine._hang" in v for k, v in stacks.items()), stacks
    assert stopped["next_actions"][0].startswith("next step: read the stacks"), stopped["next_actions"]


def test_a_hang_after_engine_wide_stalls_heads_them(tmp_path: Path) -> None:
    """Round Q2's case, made on purpose: pauses before the hang own the p99 token gaps, the
    hang strands most requests. The requests lost outrank the late tokens."""
    db = tmp_path / "sh.duckdb"
    _run(db, *closed_loop(16, 5, "uniform:50:110", "70"), "--timeout", "4",
         engine=("--fault", "periodic-stall:every_s=0.3,duration_ms=90", "--fault", "hang:at_step=140"),
         expect_rc=1)
    rc, doc = triage(db)
    head = _head(doc)
    assert rc == 1 and head["verdict"] == "engine_stopped", head
    ranked = [(f["verdict"], f["severity"]) for f in doc["context"]["ranked"]]
    # The pauses are still shown, after the hang: engine-wide, or periodic when the run held
    # enough of them before the hang to find their period (both seen).
    stall = next(i for i, r in enumerate(ranked)
                 if r in (("engine_wide_stall", "critical"), ("periodic_engine_stall", "critical")))
    assert ranked.index(("engine_stopped", "critical")) < stall, ranked
    stall_damage = doc["context"]["ranked"][stall]["damage"]
    assert stall_damage["itl_p99_share"] > head["damage"]["itl_p99_share"], (stall_damage, head)


def test_hung_engine_without_the_watch_names_the_missing_capture(tmp_path: Path) -> None:
    db = tmp_path / "h.duckdb"
    _run(db, *closed_loop(10, 4, "uniform:70:130", "90"), "--timeout", "3", "--no-watch",
         engine=("--fault", "hang:at_step=150"), expect_rc=1)
    rc, doc = triage(db)
    head = _head(doc)
    assert rc == 1 and head["verdict"] == "engine_stopped" and head["severity"] == "critical", head
    assert head["damage"]["requests_lost"] >= 4, head
    capture = [m for m in doc["context"]["missing_data"] if m["source"] == "hang_captures"]
    assert capture and capture[0]["relevant"], doc["context"]["missing_data"]
    # the triage was saved with the run: its report opens with the headline
    page = tmp_path / "r.html"
    r = infbench("report", "last", "--db", str(db), "--html", str(page))
    assert r.returncode == 0, r.stderr[-2000:]
    text = page.read_text()
    top = text.index("<div class='headline critical'>")
    assert top < text.index("<h2") and "engine_stopped" in text[top:text.index("</div>", top)]


def test_memory_growth_is_the_headline(tmp_path: Path) -> None:
    db = tmp_path / "m.duckdb"
    with running_engine("--fault", "memory-growth:bytes_per_request=1618033") as engine:
        _run(db, *closed_loop(220, 12, "72", "28"), url=engine.url)
    rc, doc = triage(db)
    # A stall that lies wholly on steps the engine marks host-late is the host's (round R44,
    # beside a busy neighbour: an engine-wide stall owning the p99 gaps headed it, rightly);
    # among the rest, the injected growth comes first.
    late = host_late_steps(db)
    acted = [r for r in doc["context"]["ranked"] if r["severity"] != "info"
             and not hosts_stall(r["verdict"], doc["findings"][r["finding"]].get("scope"), late)]
    assert rc == 1 and acted and acted[0]["verdict"] == "memory_growth_per_request", doc["context"]["ranked"]
    assert _head(doc)["verdict"] in {"memory_growth_per_request", *HOST_STALLS}, _head(doc)
    assert "memory" in doc["context"]["playbooks_run"]


def test_kv_exhaustion_joins_the_memory_and_stall_findings_as_one_incident(tmp_path: Path) -> None:
    db = tmp_path / "kv.duckdb"
    with running_engine("--num-gpu-blocks", "150", "--block-size", "16") as engine:
        _run(db, "--arrival", "closed", "--concurrency", "12", "--duration", "6",
             "--input-tokens", "96", "--output-tokens", "320", url=engine.url)
    rc, doc = triage(db, "--markdown", str(tmp_path / "t.md"))
    verdicts = [r["verdict"] for r in doc["context"]["ranked"]]
    assert rc == 1 and "kv_cache_exhausted" in verdicts, doc["context"]["ranked"]
    assert _head(doc)["verdict"] in ("kv_cache_exhausted", "preemption_stall"), _head(doc)
    joined = [i for i in doc["context"]["incidents"] if "kv_cache_exhausted" in i["members"]]
    if "preemption_stall" in verdicts:
        assert joined and "preemption_stall" in joined[0]["members"], doc["context"]["incidents"]
    md = (tmp_path / "t.md").read_text()
    assert md.startswith(f"## infbench triage of run `{doc['run_id']}`") and "kv_cache_exhausted" in md


@pytest.mark.parametrize("neighbour", [False, True], ids=["quiet", "busy_neighbour"])
def test_healthy_run_is_no_problem_found_with_exit_0(tmp_path: Path, neighbour: bool) -> None:
    db = tmp_path / "c.duckdb"
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if neighbour else None
    try:
        _run(db, *closed_loop(70, 6, "uniform:90:260", "uniform:50:120"))
    finally:
        if busy is not None:
            busy.kill()
    con = duckdb.connect(str(db), read_only=True)
    try:  # the live watch raised no false alarm
        assert con.execute("SELECT count(*) FROM watch_triggers").fetchone() == (0,)
    finally:
        con.close()
    rc, doc = triage(db)
    # Nothing to act on, but for pauses the host itself made (tests/support/host_pauses.py)
    late = host_late_steps(db)
    acted = [f for f in doc["findings"]
             if f["severity"] != "info" and not hosts_stall(f["verdict"], f.get("scope"), late)]
    assert acted == [], acted
    if rc == 0:
        r = infbench("diagnose", "last", "--db", str(db), timeout=180)
        assert r.returncode == 0, r.stdout[-3000:]
        assert "headline: no problem found" in r.stdout


def test_bad_input_is_one_line_exit_2(tmp_path: Path) -> None:
    db = tmp_path / "e.duckdb"
    _run(db, *closed_loop(8, 2, "64", "8"))
    for args, words in ((["nosuchrun"], "nosuchrun"), (["last", "--min-stall", "-1"], "min_stall_ms")):
        r = infbench("diagnose", *args, "--db", str(db))
        err = r.stderr.strip()
        assert r.returncode == 2 and words in err and "\n" not in err and "Traceback" not in err, err


def test_throttled_replica_in_a_fleet_is_the_headline(tmp_path: Path) -> None:
    db = tmp_path / "f.duckdb"
    with running_engine() as a, running_engine() as b, \
            running_engine("--fault", "throttle:reason=power,sm_clock_mhz=820") as hot:
        urls = [x for name, e in (("a", a), ("b", b), ("hot", hot)) for x in ("--url", f"{name}={e.url}")]
        r = infbench("run", *urls, "--db", str(db), "--quiet", "--rate", "26", "--num-requests", "140",
                     "--input-tokens", "uniform:160:480", "--output-tokens", "uniform:40:90", "--seed", "5",
                     timeout=240)
        assert r.returncode == 0, r.stderr[-2000:]
    rc, doc = triage(db)
    head = _head(doc)
    assert rc == 1 and head["verdict"] == "replica_slower" and head["playbook"] == "replicas", head
    slower = next(r for r in doc["context"]["ranked"] if r["verdict"] == "replica_slower")
    assert doc["findings"][slower["finding"]]["scope"] == {"replica": "hot"}
    assert "memory" in doc["context"]["playbooks_skipped"]  # one engine's ledger only



def test_a_batch_cap_below_the_load_is_found_by_the_config_playbook(tmp_path: Path) -> None:
    db = tmp_path / "cap.duckdb"
    _run(db, *closed_loop(30, 8, "uniform:90:280", "55"), engine=("--max-num-seqs", "3"))
    rc, doc = triage(db)
    assert rc == 1 and "config" in doc["context"]["playbooks_run"], doc["context"]["playbooks_run"]
    cap = next(f for f in doc["findings"] if f["verdict"] == "batch_capped_by_max_num_seqs")
    assert cap["severity"] == "warning" and "max_num_seqs=3 (set)" in cap["summary"], cap["summary"]
    queue = next(e["values"] for e in cap["evidence"] if e["name"] == "queue")
    assert queue["peak_running"] == 3 and queue["peak_waiting"] >= 1, queue
    r = infbench("diagnose", "config", "last", "--db", str(db), "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["findings"][0]["verdict"] == cap["verdict"]



def test_a_slow_device_is_named_by_its_bandwidth(tmp_path: Path) -> None:
    # 1.7x slower than its datasheet: the mbu playbook's low decode MBU or the stalls
    # playbook's uniform slowdown against the roofline, never a stall or "no problem".
    db = tmp_path / "sd.duckdb"
    _run(db, *closed_loop(26, 6, "uniform:110:250", "95"), engine=("--fault", "slow-device:factor=1.7"))
    rc, doc = triage(db)
    head = _head(doc)
    assert rc == 1 and head["verdict"] in ("decode_mbu", "uniform_slowdown"), head
    assert head["severity"] == "warning", head
