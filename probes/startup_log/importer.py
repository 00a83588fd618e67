"""`import_startup_log`: a start-up log file into `startup_logs` / `startup_events`, in one
transaction. The playbook (`playbooks/startup`) reads it back with SQL."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import duckdb

from infbench.store import get_run
from probes.startup_log.parse import StartupLog, StartupLogError, parse_startup_log

MAX_BYTES = 64 << 20  # a start-up log is kilobytes; a file this large is something else


@dataclass(frozen=True)
class ImportedLog:
    log_id: str
    path: str
    log: StartupLog
    run_id: str | None


def read_log(path: Path) -> str:
    try:
        if path.is_dir():
            raise StartupLogError(f"{path}: is a directory, not a log file")
        if path.stat().st_size > MAX_BYTES:
            raise StartupLogError(f"{path}: {path.stat().st_size} bytes is not a start-up log")
        data = path.read_bytes()
    except OSError as exc:
        raise StartupLogError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    if b"\x00" in data[:4096]:
        raise StartupLogError(f"{path}: a binary file, not a log")
    return data.decode("utf-8", errors="replace")


def import_startup_log(con: duckdb.DuckDBPyConnection, path: str | Path,
                       run: str | None = None) -> ImportedLog:
    """Parse and store one log; the same file imported again replaces its rows (its id is
    the hash of its text)."""
    p = Path(path)
    text = read_log(p)
    log = parse_startup_log(text, str(p))
    run_id = get_run(con, run).run_id if run else None
    log_id = "sl-" + hashlib.sha256(text.encode()).hexdigest()[:12]
    now = datetime.now(UTC).replace(tzinfo=None)
    con.execute("BEGIN TRANSACTION")
    try:
        con.execute("DELETE FROM startup_events WHERE log_id = ?", [log_id])
        con.execute("DELETE FROM startup_logs WHERE log_id = ?", [log_id])
        con.execute(
            "INSERT INTO startup_logs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [log_id, now, str(p), log.engine, log.version, log.log_format, len(log.ranks),
             log.lines, json.dumps(log.settings), log.outcome, log.failure_kind,
             log.failure_phase, log.failure_line, log.failure_text, run_id,
             json.dumps(log.notes)])
        if log.events:
            con.executemany(
                "INSERT INTO startup_events VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [[log_id, e.seq, e.line_no, e.rank, e.phase, e.key, e.value, e.unit, e.text]
                 for e in log.events])
        con.execute("COMMIT")
    except Exception:
        con.execute("ROLLBACK")
        raise
    return ImportedLog(log_id, str(p), log, run_id)
