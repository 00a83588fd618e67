"""Captured configurations in the store (`configs`, `config_values`; docs/store.md).

A key has one row, or two where the engine printed one value at start-up and reported
another after resolving it: the `resolved` row is the final value, the other is what was
printed (or set), kept so a diff can say which is final.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import duckdb

from infbench.config.model import Captured, Setting, mask_setting


@dataclass(frozen=True)
class StoredConfig:
    config_id: str
    created_at: datetime
    engine: str
    version: str | None
    source_kind: str
    source: str | None
    label: str | None
    run_id: str | None
    digest: str
    notes: list[str]
    settings: dict[str, Setting]
    printed: dict[str, Setting] = field(default_factory=dict)  # superseded start-up values

    @property
    def name(self) -> str:
        return self.label or self.config_id

    def values(self) -> dict[str, Any]:
        return {k: s.value for k, s in self.settings.items()}


class ConfigNotFound(LookupError):
    pass


def new_config_id() -> str:
    return "cfg-" + datetime.now(UTC).strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]


def save_config(con: duckdb.DuckDBPyConnection, cap: Captured, *, label: str | None = None,
                run_id: str | None = None) -> str:
    """Store a whole capture in one transaction (a failure stores none of it)."""
    config_id = new_config_id()
    rows = []
    for s in sorted([*cap.settings.values(), *cap.printed.values()], key=lambda s: s.key):
        s = mask_setting(s)  # captures are masked when built; this guards any other caller
        rows.append((config_id, s.key, json.dumps(s.value, default=str), s.origin, s.raw_key, s.line))
    con.execute("BEGIN TRANSACTION")
    try:
        con.execute(
            "INSERT INTO configs (config_id, created_at, engine, version, source_kind, source, "
            "label, run_id, digest, notes) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [config_id, datetime.now(UTC).replace(tzinfo=None), cap.engine, cap.version,
             cap.source_kind, cap.source, label, run_id, cap.digest(), json.dumps(cap.notes)])
        if rows:
            con.executemany("INSERT INTO config_values (config_id, key, value, origin, raw_key, "
                            "source_line) VALUES (?, ?, ?, ?, ?, ?)", rows)
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return config_id


_COLS = "config_id, created_at, engine, version, source_kind, source, label, run_id, digest, notes"


def _resolve_id(con: duckdb.DuckDBPyConnection, ref: str) -> str:
    if ref == "last":
        row = con.execute("SELECT config_id FROM configs ORDER BY created_at DESC LIMIT 1").fetchone()
    else:
        row = con.execute(
            "SELECT config_id FROM configs WHERE config_id = ? OR label = ? OR run_id = ? "
            "ORDER BY (config_id = ?) DESC, created_at DESC LIMIT 1", [ref, ref, ref, ref]).fetchone()
        if row is None:
            rows = con.execute("SELECT config_id FROM configs WHERE config_id LIKE ? "
                               "ORDER BY created_at DESC LIMIT 2", [ref + "%"]).fetchall()
            row = rows[0] if len(rows) == 1 else None
    if row is None:
        raise ConfigNotFound(f"config {ref!r}: no such config id, label or run in the store "
                             "(`infbench config list` shows them)")
    return str(row[0])


def load_config(con: duckdb.DuckDBPyConnection, ref: str) -> StoredConfig:
    cid = _resolve_id(con, ref)
    row = con.execute(f"SELECT {_COLS} FROM configs WHERE config_id = ?", [cid]).fetchone()
    assert row is not None
    settings: dict[str, Setting] = {}
    printed: dict[str, Setting] = {}
    for k, v, origin, raw, line in con.execute(
            "SELECT key, value, origin, raw_key, source_line FROM config_values "
            "WHERE config_id = ? ORDER BY key, origin = 'resolved'", [cid]).fetchall():
        s = Setting(k, json.loads(v) if v is not None else None, origin, raw, line)
        if k in settings:  # the second row of a key is the resolved, final one
            printed[k] = settings[k]
        settings[k] = s
    return StoredConfig(row[0], row[1], row[2], row[3], row[4], row[5], row[6], row[7], row[8],
                        json.loads(row[9] or "[]"), settings, printed)


def list_configs(con: duckdb.DuckDBPyConnection, limit: int = 50) -> list[tuple[Any, ...]]:
    return con.execute(
        "SELECT c.config_id, c.created_at, c.engine, c.version, c.source_kind, c.label, c.run_id, "
        "count(DISTINCT v.key) FROM configs c LEFT JOIN config_values v USING (config_id) "
        "GROUP BY ALL ORDER BY c.created_at DESC LIMIT ?", [limit]).fetchall()
