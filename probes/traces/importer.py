"""`import_trace`: a trace file or a directory of rank files into the store, in one transaction.

What a path holds is told by its bytes, not its name: SQLite's header means an Nsight
Systems export, gzip's magic or JSON means a Kineto trace. A directory holds one file per
rank (Kineto's `*.json[.gz]` as `torch.profiler` writes them, or one Nsight export per rank);
a rank comes from the file's `distributedInfo.rank`, else from `rank-N`/`rankN` in its name,
else from its place in name order.
"""

from __future__ import annotations

import tempfile
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb

from infbench.store import StoreError, get_run
from probes.traces import kineto, nsys
from probes.traces.errors import TraceError
from probes.traces.paths import rank_files

_EVENT_TABLES = ("trace_gpu_ops", "trace_api_calls", "trace_cpu_ops", "trace_annotations",
                 "trace_collectives")


@dataclass(frozen=True)
class ImportedTrace:
    trace_id: str
    source: str                 # kineto | nsys
    path: str
    ranks: list[int]
    events: int                 # events read from the files
    counts: dict[str, int]      # rows stored per table
    run_id: str | None = None
    notes: list[str] = field(default_factory=list)


def new_trace_id() -> str:
    return "tr-" + datetime.now(UTC).strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]




def import_trace(con: duckdb.DuckDBPyConnection, path: str | Path,
                 run: str | None = None) -> ImportedTrace:
    """Import the trace at `path` (file or rank directory), linked to `run` (id, prefix or
    'last') when given. All or nothing: on any error the store is left as it was.

    Ownership: the caller owns `con` (writable, no transaction open) and closes it."""
    path = Path(path)
    source, files = rank_files(path)
    run_id = None
    if run is not None:
        try:
            run_id = get_run(con, run).run_id
        except StoreError as exc:
            raise TraceError(str(exc).splitlines()[0]) from None
    trace_id = new_trace_id()
    staged: list[tuple[Path, int | None, str, dict[str, Any]]] = []
    try:
        if source == "kineto":
            # Parsed before the transaction: a malformed file fails here and aborts nothing.
            with tempfile.TemporaryDirectory(prefix="infbench-trace-") as tmp:
                for i, (f, hint) in enumerate(files):
                    table = f"_kineto_{trace_id.replace('-', '_')}_{i}"
                    try:
                        staged.append((f, hint, table, kineto.stage(con, f, Path(tmp), table)))
                    except TraceError as exc:
                        raise TraceError(f"{f}: {exc}") from None
        return _transact(con, path, trace_id, source, files, staged, run_id)
    finally:
        for *_, table, _meta in staged:
            con.execute(f"DROP TABLE IF EXISTS {table}")


def _transact(con: duckdb.DuckDBPyConnection, path: Path, trace_id: str, source: str,
              files: list[tuple[Path, int | None]], staged: list[tuple[Path, int | None, str, dict[str, Any]]],
              run_id: str | None) -> ImportedTrace:
    con.execute("BEGIN TRANSACTION")
    try:
        ranks_rows, events, notes, fmt, producer = _load(con, trace_id, source, files, staged)
        seen: set[int] = set()
        for row in ranks_rows:
            if row["rank"] in seen:
                raise TraceError(f"{path}: two files claim rank {row['rank']}")
            seen.add(row["rank"])
        con.executemany(
            "INSERT INTO trace_ranks (trace_id, rank, path, world_size, epoch_offset_ns, start_ns, "
            "end_ns, round_to_us, devices, metadata) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [[trace_id, r["rank"], r["path"], r["world_size"], r["epoch_offset_ns"], r["start_ns"],
              r["end_ns"], r["round_to_us"], r["devices"], r["metadata"]] for r in ranks_rows])
        con.execute(
            "INSERT INTO traces (trace_id, run_id, source, path, imported_at, format_version, "
            "producer, ranks, events, notes) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [trace_id, run_id, source, str(path.resolve()), datetime.now(UTC).replace(tzinfo=None),
             fmt, producer, len(ranks_rows), events, "\n".join(notes) or None])
        # One statement for the five counts: on a small trace each statement's fixed cost,
        # not the data, is what an import spends its time on.
        found = con.execute("SELECT " + ", ".join(
            f"(SELECT count(*) FROM {t} WHERE trace_id = $id)" for t in _EVENT_TABLES),
            {"id": trace_id}).fetchone() or (0,) * len(_EVENT_TABLES)
        counts = dict(zip(_EVENT_TABLES, map(int, found), strict=True))
        con.execute("COMMIT")
    except TraceError:
        con.execute("ROLLBACK")
        raise
    except duckdb.Error as exc:
        con.execute("ROLLBACK")
        raise TraceError(f"{path}: import failed ({str(exc).splitlines()[0]})") from None
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return ImportedTrace(trace_id, source, str(path), sorted(seen), events, counts, run_id, notes)


def _load(con: duckdb.DuckDBPyConnection, trace_id: str, source: str,
          files: list[tuple[Path, int | None]],
          staged: list[tuple[Path, int | None, str, dict[str, Any]]],
          ) -> tuple[list[dict[str, Any]], int, list[str], str | None, str | None]:
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    events = 0
    fmt = producer = None
    if source == "nsys":
        for f, hint in files:
            try:
                facts = nsys.load(con, trace_id, f, hint if len(files) > 1 else None)
            except TraceError as exc:
                raise TraceError(f"{f}: {exc}") from None
            rows += facts["ranks"]
            events += facts["events"]
            notes += facts["notes"]
            fmt, producer = facts["format_version"], facts["producer"]
        return rows, events, notes, fmt, producer
    for f, hint, table, meta in staged:
        row = kineto.insert(con, trace_id, hint, f, table, meta)
        events += row.pop("events")
        fmt = row.pop("format_version")
        rows.append(row)
    return rows, events, notes, fmt, "PyTorch profiler (Kineto)"


def delete_trace(con: duckdb.DuckDBPyConnection, trace_id: str) -> None:
    """Remove a trace and all its events (one transaction)."""
    con.execute("BEGIN TRANSACTION")
    try:
        for t in ("trace_gpu_ops", "trace_api_calls", "trace_cpu_ops", "trace_annotations",
                  "trace_collectives", "trace_ranks", "traces"):
            con.execute(f"DELETE FROM {t} WHERE trace_id = ?", [trace_id])
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
