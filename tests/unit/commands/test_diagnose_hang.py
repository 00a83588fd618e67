"""`infbench diagnose hang`: dumps in, findings out; hostile or broken dumps refused with one
line and exit 2 (nothing stored); a capture linked to a run keeps its findings with it."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import socket
from pathlib import Path

import pytest
from typer.testing import CliRunner

from infbench.cli import app
from infbench.store import open_store
from infbench.store.findings import load_diagnoses
from tests.support.http_stub import StubServer
from tests.support.stores import new_store
from tests.support.synthetic_runs import write_timeline

runner = CliRunner()
FIX = Path(__file__).resolve().parents[2] / "fixtures" / "hang"


def _hang(*args: str):
    return runner.invoke(app, ["diagnose", "hang", *args])


def _lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.strip()]


class _Evil:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_dump_folder_names_rank_1_and_capture_is_replayable(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    r = _hang("--dumps", str(FIX / "hang"), "--db", str(db), "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert [f["verdict"] for f in d["findings"]] == ["rank_behind"]
    assert d["findings"][0]["title"].startswith("Rank 1 is behind: collective #19")
    again = _hang("--capture", "last", "--db", str(db), "--json")
    assert json.loads(again.output)["findings"][0]["summary"] == d["findings"][0]["summary"]
    text = _hang("--capture", "last", "--store", str(db))
    assert text.exit_code == 0 and "checks, in the runbook's order" in text.output
    assert "findings not kept with a run" in text.output


def test_hostile_dump_is_refused_in_one_line_and_nothing_is_stored(tmp_path: Path) -> None:
    folder = tmp_path / "dumps"
    shutil.copytree(FIX / "hang", folder)
    marker = tmp_path / "pwned"
    (folder / "rank_1").write_bytes(pickle.dumps(_Evil(marker), protocol=2))
    db = tmp_path / "s.duckdb"
    r = _hang("--dumps", str(folder), "--db", str(db))
    assert r.exit_code == 2
    (line,) = _lines(r.output)
    assert "rank_1: refused" in line and "system" in line
    assert not marker.exists() and not db.exists()


@pytest.mark.parametrize("content, words", [
    (lambda b: b[: len(b) // 3], "truncated"),
    (lambda b: b"\x80\x04garbage" + bytes(range(40)), "not a Flight Recorder dump"),
])
def test_truncated_or_garbage_dump_is_one_line_exit_2(tmp_path: Path, content, words: str) -> None:
    folder = tmp_path / "dumps"
    shutil.copytree(FIX / "healthy", folder)
    (folder / "rank_0").write_bytes(content((folder / "rank_0").read_bytes()))
    r = _hang("--dumps", str(folder), "--db", str(tmp_path / "s.duckdb"))
    assert r.exit_code == 2
    (line,) = _lines(r.output)
    assert words in line and "rank_0" in line


def test_linked_run_keeps_the_findings(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    con = new_store(db)
    write_timeline(con, requests=4, concurrency=2, tokens=20)
    run_id = con.execute("SELECT run_id FROM runs").fetchone()[0]
    con.close()
    r = _hang("--dumps", str(FIX / "mismatch-op"), "--run", "last", "--db", str(db))
    assert r.exit_code == 0, r.output
    assert "Collective #19 mismatched" in r.output and "saved 1 finding(s)" in r.output
    con = open_store(db, read_only=True)
    (stored,) = load_diagnoses(con, run_id, "hang")
    assert [f["verdict"] for f in stored.findings] == ["collective_mismatch"]
    assert con.execute("SELECT run_id FROM hang_captures").fetchone()[0] == run_id
    con.close()


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.mark.parametrize("args, words", [
    ([], "give one of"),
    (["--url", "http://127.0.0.1:1", "--dumps", "x"], "give one of"),
    (["--pids", "12,abc"], "'abc' is not a process id"),
    (["--min-wait", "-1", "--dumps", "x"], "--min-wait must be >= 0"),
    (["--dumps", "/nonexistent/dir"], "not a directory"),
    (["--url", "ftp://x"], "expected http://HOST:PORT"),
    (["--capture", "hg-none"], "no such hang capture"),
    (["--capture", "last", "--run", "last"], "--run links a new capture"),
])
def test_bad_input_is_one_line_exit_2(tmp_path: Path, args: list[str], words: str) -> None:
    db = tmp_path / "s.duckdb"
    new_store(db).close()
    r = _hang(*args, "--db", str(db))
    assert r.exit_code == 2, r.output
    (line,) = _lines(r.output)
    assert words in line


def test_engine_that_does_not_answer_is_one_line(tmp_path: Path) -> None:
    r = _hang("--url", f"http://127.0.0.1:{_closed_port()}", "--db", str(tmp_path / "s.duckdb"))
    assert r.exit_code == 2
    (line,) = _lines(r.output)
    assert "/debug/ranks: no answer" in line


def test_findings_print_what_was_recorded_literally() -> None:
    # Names from a dump, paths and SQL with [a-z] classes are text, not rich markup.
    from rich.console import Console

    from infbench.commands.diagnose import print_diagnosis
    from playbooks.findings import Diagnosis, Evidence, Finding
    d = Diagnosis("hang", "r1", {"flight_recorder": True}, [Finding(
        "collective_mismatch", "title [red]x", 0.9, "critical", "rank 1 issued [bold]x[/bold]",
        [Evidence("e", {"rank1": "gloo:[link=http://x]y"}, "SELECT regexp_matches(a, '[a-z]+')",
                  "note [dim]")], ["do [this]"])], notes=["n [b]"])
    c = Console(record=True, width=200)
    print_diagnosis(c, d, show_sql=True)
    out = c.export_text()
    for shown in ("rank 1 issued [bold]x[/bold]", "gloo:[link=http://x]y", "'[a-z]+'",
                  "note [dim]", "do [this]", "title [red]x", "note: n [b]"):
        assert shown in out


def test_a_server_without_debug_ranks_is_told_to_use_pids(tmp_path: Path) -> None:
    import http.server
    import threading

    class NotFound(http.server.BaseHTTPRequestHandler):  # any HTTP server without the route
        def do_GET(self) -> None:
            self.send_error(404)

        def log_message(self, *args: object) -> None:
            pass

    srv = StubServer(("127.0.0.1", 0), NotFound)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        r = _hang("--url", f"http://127.0.0.1:{srv.server_address[1]}", "--db",
                  str(tmp_path / "s.duckdb"))
    finally:
        srv.shutdown()
        srv.server_close()
    assert r.exit_code == 2
    (line,) = _lines(r.output)
    assert "/debug/ranks: HTTP 404" in line and "--pids with --dumps" in line
