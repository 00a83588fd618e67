"""A capture into the store's hang tables, in one transaction (all of it or nothing)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import duckdb
import pyarrow as pa

from infbench.store import get_run
from infbench.store.arrays import table as arrow_table
from infbench.store.hang_schema import HANG_COLUMNS
from infbench.store.transaction import insert_arrow, transaction
from probes.hang.frdump import FrDump
from probes.hang.model import Capture

_ARROW = {"VARCHAR": pa.string(), "BIGINT": pa.int64(), "INTEGER": pa.int32(),
          "BOOLEAN": pa.bool_(), "DOUBLE": pa.float64(), "TIMESTAMP": pa.timestamp("us")}


def _schema(table: str) -> pa.Schema:
    return pa.schema([pa.field(n, _ARROW[t.split()[0]]) for n, t in HANG_COLUMNS[table]])


def _arrow(table: str, rows: list[dict[str, Any]] | list[pa.Table]) -> pa.Table:
    if rows and isinstance(rows[0], pa.Table):
        return pa.concat_tables(rows)
    names = [n for n, _ in HANG_COLUMNS[table]]
    return arrow_table({n: [r.get(n) for r in rows] for n in names}, _schema(table))


class _Json:
    """json.dumps with a memo: shapes, dtypes and call sites repeat on every step."""

    def __init__(self) -> None:
        self._memo: dict[Any, str] = {}

    def __call__(self, value: Any) -> str:
        key = repr(value)
        out = self._memo.get(key)
        if out is None:
            out = self._memo[key] = json.dumps(value)
        return out


def _dump_rows(cid: str, rank: int, d: FrDump, js: _Json) -> dict[str, list[dict[str, Any]] | pa.Table]:
    cfg = [{"capture_id": cid, "rank": rank, "pg_key": k, "pg_name": v["name"],
            "pg_desc": v["desc"],
            "group_ranks": ",".join(map(str, v["ranks"])) if v["ranks"] is not None else None,
            "group_size": len(v["ranks"]) if v["ranks"] is not None else None}
           for k, v in d.pg_config.items()]
    status = [{"capture_id": cid, "rank": rank, "pg_key": k,
               "last_enqueued": v.get("last_enqueued_collective"),
               "last_started": v.get("last_started_collective"),
               "last_completed": v.get("last_completed_collective")}
              for k, v in d.pg_status.items()]
    # Entries column by column: one Arrow array per column, no dict per row.
    es = d.entries
    cols: dict[str, list[Any]] = {"capture_id": [cid] * len(es), "rank": [rank] * len(es)}
    for name, _ in HANG_COLUMNS["hang_fr_entries"][2:]:
        if name in ("input_sizes", "input_dtypes", "output_sizes", "output_dtypes", "frames"):
            cols[name] = [js(getattr(e, name)) for e in es]
        elif name in ("input_numel", "output_numel"):
            cols[name] = [getattr(e, name) for e in es]
        else:
            cols[name] = [e.__dict__[name] for e in es]
    return {"hang_pg_config": cfg, "hang_pg_status": status,
            "hang_fr_entries": pa.table(cols, schema=_schema("hang_fr_entries"))}


def write_capture(con: duckdb.DuckDBPyConnection, cap: Capture) -> dict[str, int]:
    """Store `cap`; returns rows written per table. The caller owns `con` (writable)."""
    cap.check_invariants()
    rows: dict[str, list[Any]] = {t: [] for t in HANG_COLUMNS}
    js = _Json()
    rows["hang_captures"].append({
        "capture_id": cap.capture_id, "run_id": cap.run_id,
        "created_at": datetime.now(UTC).replace(tzinfo=None), "source": cap.source,
        "target": cap.target, "world_size": cap.world_size, "hostname": cap.hostname,
        "notes": json.dumps(cap.notes)})
    for r in cap.ranks:
        rows["hang_ranks"].append({
            "capture_id": cap.capture_id, "rank": r.rank, "pid": r.pid, "alive": r.alive,
            "dump_path": r.dump_path, "dump_status": r.dump_status, "dump_error": r.dump_error,
            "dumped_at_ns": r.dumped_at_ns, "fr_version": r.dump.version if r.dump else None,
            "fr_entries": len(r.dump.entries) if r.dump else None,
            "stack_source": r.stacks.source, "stack_status": r.stacks.status,
            "stack_error": r.stacks.error, "stacks_at_ns": r.stacks.at_ns})
        if r.dump is not None:
            for t, rs in _dump_rows(cap.capture_id, r.rank, r.dump, js).items():
                if isinstance(rs, pa.Table):
                    rows[t].append(rs)
                else:
                    rows[t].extend(rs)
        for s in r.stack_rows():
            rows["hang_stacks"].append({"capture_id": cap.capture_id, "rank": r.rank,
                                        "pid": r.pid, **s})
    with transaction(con, f"capture {cap.capture_id}: storing it failed"):
        for table, rs in rows.items():
            if rs:
                insert_arrow(con, table, [n for n, _ in HANG_COLUMNS[table]], _arrow(table, rs))
    return {t: sum(len(x) for x in rs) if rs and isinstance(rs[0], pa.Table) else len(rs)
            for t, rs in rows.items()}


def store_capture(con: duckdb.DuckDBPyConnection, cap: Capture, run: str | None = None) -> None:
    """Link `cap` to `run` (id, prefix or 'last'; StoreError if none) and store it."""
    if run is not None:
        cap.run_id = get_run(con, run).run_id
    write_capture(con, cap)
