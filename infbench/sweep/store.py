"""Sweep rows in the store (schema version 2): the sweep, and each point's run."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import duckdb

from infbench.store import StoreError


def new_sweep_id() -> str:
    return "sweep-" + datetime.now(UTC).strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]


def create_sweep(con: duckdb.DuckDBPyConnection, sweep_id: str, mode: str, config: dict[str, Any]) -> None:
    con.execute("INSERT INTO sweeps (sweep_id, created_at, mode, config) VALUES (?, ?, ?, ?)",
                [sweep_id, datetime.now(UTC).replace(tzinfo=None), mode, json.dumps(config, sort_keys=True)])


def add_point(con: duckdb.DuckDBPyConnection, sweep_id: str, idx: int, run_id: str, kind: str,
              value: float) -> None:
    con.execute("INSERT INTO sweep_points VALUES (?, ?, ?, ?, ?)", [sweep_id, idx, run_id, kind, value])


def save_result(con: duckdb.DuckDBPyConnection, sweep_id: str, result: dict[str, Any]) -> None:
    con.execute("UPDATE sweeps SET result = ? WHERE sweep_id = ?",
                [json.dumps(result, sort_keys=True, default=str), sweep_id])


@dataclass(frozen=True)
class SweepRow:
    sweep_id: str
    mode: str
    config: dict[str, Any]
    result: dict[str, Any] | None
    points: list[tuple[int, str, str, float]]  # (point_idx, run_id, kind, value)


def get_sweep(con: duckdb.DuckDBPyConnection, ref: str) -> SweepRow:
    """A sweep by id, unique prefix, or `last`."""
    if ref in ("last", "latest"):
        rows = con.execute("SELECT sweep_id, mode, config, result FROM sweeps "
                           "ORDER BY created_at DESC, sweep_id DESC LIMIT 1").fetchall()
    else:
        rows = con.execute("SELECT sweep_id, mode, config, result FROM sweeps WHERE starts_with(sweep_id, ?)",
                           [ref]).fetchall()
    if not rows:
        raise StoreError(f"sweep {ref!r}: no such sweep in this store")
    if len(rows) > 1:
        raise StoreError(f"sweep {ref!r}: ambiguous prefix, matches {len(rows)} sweeps")
    sid, mode, cfg, res = rows[0]
    pts = con.execute("SELECT point_idx, run_id, kind, value FROM sweep_points WHERE sweep_id = ? "
                      "ORDER BY point_idx", [sid]).fetchall()
    return SweepRow(sid, mode, json.loads(cfg or "{}"), json.loads(res) if res else None,
                    [(int(a), str(b), str(c), float(d)) for a, b, c, d in pts])
