"""`infbench diagnose startup` on the reference engine's own start-up logs, freshly written
(the fixtures are this output, so they cannot drift from the engine), and its one-line
refusals."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from infbench.store import open_store
from infbench.store.findings import load_diagnoses
from tests.support.startup_logs import FIXTURES, REFERENCE_LOGS, engine_startup_log

pytestmark = pytest.mark.e2e

_STAMP = re.compile(r"^(INFO|ERROR|WARNING) \d\d-\d\d [\d:]+ ", re.M)


def infbench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "infbench", *args], capture_output=True,
                          text=True, timeout=120)


def _memory_lines(text: str) -> list[str]:
    """The start-up logger's lines (vLLM's record format), time stamps dropped: the memory
    budget. The config lines before them change with every new engine setting."""
    return [_STAMP.sub(r"\1 ", ln) for ln in text.splitlines() if _STAMP.match(ln)]


@pytest.mark.parametrize("name", sorted(REFERENCE_LOGS))
def test_fixture_is_what_the_engine_prints_now(name: str) -> None:
    fresh = engine_startup_log(REFERENCE_LOGS[name])
    stored = (FIXTURES / name).read_text(encoding="utf-8")
    assert _memory_lines(fresh) == _memory_lines(stored), (
        "the engine's start-up budget changed: rerun `python tests/support/startup_logs.py`")
    assert len(_memory_lines(stored)) >= 5


def test_failed_start_diagnosed_as_plan_memory_prices_it(tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    log.write_text(engine_startup_log(REFERENCE_LOGS["reference_70b_2xh100_128k_failed.log"]))
    out = infbench("diagnose", "startup", str(log), "--db", str(tmp_path / "s.duckdb"), "--json")
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    plan = json.loads(infbench("plan", "memory", "-m", "llama-3.1-70b", "-g", "h100", "-tp", "2",
                               "--max-model-len", "131072", "--json").stdout)
    assert d["findings"][0]["verdict"] == "startup_kv_cache_too_small"
    assert d["context"]["failing_term"] == plan["failing_term"]
    assert d["context"]["fits_as_configured"] is plan["fits"] is False
    assert d["context"]["fixes"][:len(plan["fixes"])] == plan["fixes"]
    # Shown to a person: each fix with its price, the SQL on request.
    shown = infbench("diagnose", "startup", str(log), "--db", str(tmp_path / "s.duckdb"), "--sql")
    assert "tp=4: fits" in shown.stdout and "FROM startup_events" in shown.stdout


def test_started_engine_and_linked_run_keep_the_findings(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    r = infbench("run", "--db", str(db), "--quiet", "--num-requests", "4", "--input-tokens", "32",
                 "--output-tokens", "4", "--engine-arg=--max-model-len", "--engine-arg=4096")
    assert r.returncode == 0, r.stderr[-1500:]
    out = infbench("diagnose", "startup", str(FIXTURES / "reference_8b_h100_started.log"),
                   "--db", str(db), "--run", "last")
    assert out.returncode == 0, out.stderr
    assert "saved 1 finding(s)" in out.stdout
    con = open_store(db, read_only=True)
    try:
        (run_id,) = con.execute("SELECT run_id FROM runs").fetchone()
        stored = load_diagnoses(con, run_id, "startup")
    finally:
        con.close()
    assert [f["verdict"] for f in stored[0].findings] == ["startup_ok"]


@pytest.mark.parametrize(("content", "message"), [
    ("just some text\n", "no start-up memory lines of vLLM or SGLang found"),
    ((FIXTURES / "sglang_scheduler_exception_truncated.log").read_text(),
     "stops inside an error before any start-up memory line"),
])
def test_not_a_startup_log_is_one_line_exit_2(tmp_path: Path, content: str, message: str) -> None:
    log = tmp_path / "x [bold].log"  # printed literally, no markup
    log.write_text(content)
    out = infbench("diagnose", "startup", str(log), "--db", str(tmp_path / "s.duckdb"))
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "x [bold].log" in lines[0]


def test_missing_file_and_bad_option_are_one_line(tmp_path: Path) -> None:
    out = infbench("diagnose", "startup", str(tmp_path / "nope.log"), "--db", str(tmp_path / "s.duckdb"))
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1
    out = infbench("diagnose", "startup", str(FIXTURES / "vllm_0.8.5_v1_started.log"), "--db",
                   str(tmp_path / "s.duckdb"), "--gpu-memory-utilization", "1.5")
    assert out.returncode == 2 and "gpu_memory_utilization" in out.stderr


def test_a_real_cpu_server_that_started_and_a_copy_cut_before_it_was_ready(tmp_path: Path) -> None:
    # Issue 24: vLLM 0.32.0 on CPU, the whole log; then the same cut after its KV lines.
    real = FIXTURES / "vllm_0.32.0_cpu_started.log"
    out = infbench("diagnose", "startup", str(real), "--db", str(tmp_path / "s.duckdb"), "--json")
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    assert d["context"]["outcome"] == "started" and d["context"]["ready_line"] == 63
    assert [f["verdict"] for f in d["findings"]] == ["startup_ok"]
    assert "524,288 tokens" in d["findings"][0]["summary"]
    cut = tmp_path / "cut.log"
    cut.write_bytes(b"\n".join(real.read_bytes().split(b"\n")[:60]) + b"\n")  # not at "\r"
    out = infbench("diagnose", "startup", str(cut), "--db", str(tmp_path / "s.duckdb"), "--json")
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    assert d["context"]["outcome"] == "incomplete" and "--gpu" not in out.stdout
    assert d["findings"][0]["title"] == ("The log ends after the KV pool was sized, before the "
                                         "server was ready")
