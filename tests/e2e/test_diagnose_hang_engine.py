"""The hang playbook against the bundled multi-rank engine (torch executor, TP=2 over gloo):

- `hang:rank=1`: `infbench run` stores the timed-out requests and `diagnose stalls` says
  `engine_stopped`; `infbench diagnose hang --url --run last` names rank 1, the stuck
  sequence id (the one the engine's own watchdog line names) and the frame where rank 0
  waits, and keeps the finding with the run;
- `mismatch:rank=1`: the mismatch type (collective_type_mismatch) and rank 1;
- the same engine before its fault, having served requests: no finding.
The two engines start together (their start-up dominates); every rank process is gone at
the end."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest
from typer.testing import CliRunner

from infbench.cli import app
from probes.hang import stacks as stacks_mod
from probes.hang.stacks import pyspy_path
from tests.e2e.engine_process import EngineProcess, launch, stop

pytest.importorskip("torch")
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240),
              pytest.mark.skipif(pyspy_path() is None, reason="py-spy is not installed")]

BASE = (sys.executable, "-m", "reference_engine", "--port", "0", "--executor", "torch",
        "--num-gpu-blocks", "64", "--max-model-len", "256", "--max-num-batched-tokens", "32",
        "--max-num-seqs", "8", "--tensor-parallel-size", "2", "--collective-timeout-s", "2")
# The hang engine is healthy for its first 19 steps (two 4-token requests take ~10): the
# no-finding check runs there first.
FAULTS = {"hang": "hang:rank=1,at_step=20", "mismatch": "mismatch:rank=1,at_step=4"}
runner = CliRunner()


def _pids_alive(pids: list[int]) -> list[int]:
    return [p for p in pids if Path(f"/proc/{p}").exists()
            and Path(f"/proc/{p}/stat").read_text().split(")")[1].split()[0] != "Z"]


@pytest.fixture(scope="module")
def engines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, tuple[EngineProcess, Path]]]:
    out: dict[str, tuple[EngineProcess, Path]] = {}
    started: dict[str, Any] = {}

    def start(name: str, fault: str | None, d: Path) -> None:
        argv = [*BASE, "--dump-dir", str(d / "dumps")] + (["--fault", fault] if fault else [])
        try:
            started[name] = launch(argv, timeout=180.0)
        except RuntimeError as exc:
            started[name] = exc

    dirs = {n: tmp_path_factory.mktemp(n) for n in FAULTS}
    threads = [threading.Thread(target=start, args=(n, f, dirs[n])) for n, f in FAULTS.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    pids: list[int] = []
    try:
        for n in FAULTS:
            eng = started[n]
            if isinstance(eng, Exception):
                raise eng
            out[n] = (eng, dirs[n])
            pids += [r["pid"] for r in eng.get_json("/debug/ranks")["ranks"]]
        yield out
    finally:
        for v in started.values():
            if isinstance(v, EngineProcess):
                stop(v)
        deadline = time.monotonic() + 15
        while _pids_alive(pids) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _pids_alive(pids) == [], "a rank outlived its engine"


def _cli(*args: str) -> Any:
    return runner.invoke(app, list(args))


def _complete(eng: EngineProcess, n: int) -> None:
    for i in range(n):
        status, _, body = eng.post_json("/v1/completions", {
            "model": "tiny-llama", "prompt": f"warm {i}", "max_tokens": 4, "ignore_eos": True,
            "temperature": 0}, timeout=60)
        assert status == 200, body


def test_healthy_engine_has_no_finding(engines, tmp_path: Path) -> None:
    eng, _ = engines["hang"]  # before its fault: two requests served, every collective done
    _complete(eng, 2)
    r = _cli("diagnose", "hang", "--url", eng.url, "--db", str(tmp_path / "s.duckdb"), "--json")
    assert r.exit_code == 0, r.output
    diag = json.loads(r.output)
    assert diag["findings"] == []
    assert all(x["dump"] == "ok" and x["stacks"] == "ok" for x in diag["context"]["ranks"])


def test_hang_run_then_diagnose_names_rank_1_the_seq_and_rank_0s_frame(engines, tmp_path: Path) -> None:
    eng, _ = engines["hang"]
    db = str(tmp_path / "s.duckdb")
    run = _cli("run", "--url", eng.url, "--num-requests", "4", "--concurrency", "4",
               "--arrival", "closed", "--input-tokens", "16", "--output-tokens", "24",
               "--timeout", "5", "--db", db)
    assert run.exit_code == 1, run.output  # requests failed: the engine hangs
    stalls = json.loads(_cli("diagnose", "stalls", "last", "--db", db, "--json").output)
    assert "engine_stopped" in [f["verdict"] for f in stalls["findings"]]
    deadline = time.monotonic() + 30
    while not any("collective watchdog" in line for line in eng.stderr_lines):
        assert time.monotonic() < deadline, "the engine's watchdog never fired"
        time.sleep(0.2)
    line = next(line for line in eng.stderr_lines if "collective watchdog" in line)
    seq = int(line.split("seq id ")[1].split(")")[0])

    r = _cli("diagnose", "hang", "--url", eng.url, "--run", "last", "--db", db, "--json")
    assert r.exit_code == 0, r.output
    diag = json.loads(r.output)
    (f,) = diag["findings"]
    assert f["verdict"] == "rank_behind"
    assert f["title"].startswith(f"Rank 1 is behind: collective #{seq} ")
    waits = {e["name"]: e["values"] for e in f["evidence"]}["where_each_rank_waits"]
    assert waits["rank0_in_collective"] is True
    assert waits["rank0_waits_in"].startswith("broadcast (torch/distributed/distributed_c10d.py:")
    assert "reference_engine/parallel/" in waits["rank0_called_from"]
    assert waits["rank1_in_collective"] is False
    # kept with the run: the stored diagnosis is the one printed
    shown = json.loads(_cli("diagnose", "hang", "--capture", "last", "--db", db, "--json").output)
    assert shown["run_id"] == diag["run_id"] and shown["findings"][0]["title"] == f["title"]


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="needs root and setpriv to run py-spy as a user ptrace refuses")
def test_ptrace_refused_falls_back_to_the_engines_faulthandler_stacks(
        engines, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    eng, _ = engines["hang"]  # still hung after the test above (or hangs now)
    _quiet_in_background(eng)
    wrapper = tmp_path / "py-spy-as-nobody"
    wrapper.write_text(f"#!/bin/sh\nexec setpriv --reuid=65534 --regid=65534 --clear-groups "
                       f"{pyspy_path()} \"$@\"\n")
    wrapper.chmod(0o755)
    monkeypatch.setattr(stacks_mod, "pyspy_path", lambda: str(wrapper))
    deadline = time.monotonic() + 60
    while eng.request("GET", "/health")[0] == 200:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    r = _cli("diagnose", "hang", "--url", eng.url, "--db", str(tmp_path / "s.duckdb"), "--json")
    assert r.exit_code == 0, r.output
    diag = json.loads(r.output)
    assert [x["stacks"] for x in diag["context"]["ranks"]] == ["ok", "ok"]
    (f,) = diag["findings"]
    waits = {e["name"]: e["values"] for e in f["evidence"]}["where_each_rank_waits"]
    assert waits["rank0_waits_in"].startswith("broadcast (")  # faulthandler: no class names
    assert waits["rank0_thread"].endswith("(flight_recorder_thread)")
    con = duckdb.connect(str(tmp_path / "s.duckdb"), read_only=True)
    assert {s for (s,) in con.execute("SELECT stack_source FROM hang_ranks").fetchall()} == {"faulthandler"}
    con.close()


def _quiet_in_background(eng: EngineProcess) -> None:
    threading.Thread(target=_quiet, args=(eng,), daemon=True).start()


def test_mismatch_names_the_type_and_rank_1(engines, tmp_path: Path) -> None:
    eng, _ = engines["mismatch"]
    _quiet_in_background(eng)  # steps up to the fault
    deadline = time.monotonic() + 60
    while eng.request("GET", "/health")[0] == 200:
        assert time.monotonic() < deadline, "the mismatch never tripped the watchdog"
        time.sleep(0.2)
    r = _cli("diagnose", "hang", "--url", eng.url, "--db", str(tmp_path / "s.duckdb"), "--json")
    assert r.exit_code == 0, r.output
    (f,) = json.loads(r.output)["findings"]
    culprit = {e["name"]: e["values"] for e in f["evidence"]}["culprit"]
    assert (f["verdict"], culprit["mismatch"], culprit["culprit_ranks"]) == (
        "collective_mismatch", "collective_type_mismatch", "1")
    assert culprit["named_by"].startswith(("novelty", "majority"))


def _quiet(eng: EngineProcess) -> None:
    with contextlib.suppress(OSError):
        eng.request("POST", "/v1/completions", {"model": "tiny-llama", "prompt": "x",
                                                "max_tokens": 30, "ignore_eos": True}, timeout=60)
