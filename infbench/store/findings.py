"""The `diagnoses` and `findings` tables: what a playbook concluded about a run, kept with it.

The store knows nothing about playbooks: `save_diagnosis` takes the plain dict a playbook's
diagnosis serialises to (`Diagnosis.to_dict()`), checks the fields it stores, and
`load_diagnoses` gives plain dicts back, so reports read findings without running anything.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import duckdb
import pyarrow as pa

from infbench.store.arrays import table as arrow_table
from infbench.store.db import StoreError
from infbench.store.schema import DIAGNOSES, FINDINGS, Table
from infbench.store.transaction import insert_arrow, transaction

SEVERITIES = ("info", "warning", "critical")


@dataclass(frozen=True)
class StoredDiagnosis:
    run_id: str
    playbook: str
    created_at: datetime
    data_sources: dict[str, bool]
    context: dict[str, Any]
    notes: list[str]
    # Each: verdict, title, severity, confidence, summary, next_actions (list of str),
    # evidence (list of {name, values, sql, note}), data_sources; most severe first.
    findings: list[dict[str, Any]]


def _json(value: Any) -> str:
    # Playbooks compute with numpy: its scalars serialise as the Python numbers they hold.
    def plain(o: Any) -> Any:
        item = getattr(o, "item", None)
        if callable(item):
            return item()
        raise TypeError(f"{type(o).__name__} is not JSON serialisable")

    return json.dumps(value, default=plain, sort_keys=False)


def _field(d: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if key not in d:
        raise ValueError(f"{where}.{key}: missing")
    v = d[key]
    if not isinstance(v, kind) or isinstance(v, bool) and kind is not bool:
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise ValueError(f"{where}.{key}: expected {names}, got {type(v).__name__}")
    return v


def _finding_row(f: Mapping[str, Any], i: int) -> dict[str, Any]:
    where = f"findings[{i}]"
    severity = _field(f, "severity", str, where)
    if severity not in SEVERITIES:
        raise ValueError(f"{where}.severity: {severity!r} is not one of {', '.join(SEVERITIES)}")
    confidence = float(_field(f, "confidence", (int, float), where))
    if not 0.0 <= confidence <= 1.0:
        raise ValueError(f"{where}.confidence: {confidence} is not in [0, 1]")
    evidence = list(_field(f, "evidence", (list, tuple), where))
    for j, e in enumerate(evidence):
        _field(e, "name", str, f"{where}.evidence[{j}]")
        _field(e, "values", Mapping, f"{where}.evidence[{j}]")
    actions = [str(a) for a in _field(f, "next_actions", (list, tuple), where)]
    return {"verdict": _field(f, "verdict", str, where), "title": _field(f, "title", str, where),
            "severity": severity, "confidence": confidence,
            "summary": _field(f, "summary", str, where), "next_actions": _json(actions),
            "evidence": _json([{"name": e["name"], "values": dict(e["values"]),
                                "sql": e.get("sql"), "note": e.get("note")} for e in evidence])}


def _arrow(table: Table, rows: list[dict[str, Any]]) -> pa.Table:
    schema = pa.schema([pa.field("run_id", pa.string()), *table.arrow_schema()])
    return arrow_table({f.name: [r.get(f.name) for r in rows] for f in schema}, schema)


def save_diagnosis(con: duckdb.DuckDBPyConnection, diagnosis: Mapping[str, Any]) -> int:
    """Store one playbook's diagnosis of a run, replacing that playbook's earlier rows for the
    run; return the number of findings stored. All or nothing (one transaction).

    Ownership: the caller owns `con` (opened writable) and closes it; no transaction may be
    open on it. Rows for other playbooks and other runs are never touched.
    """
    run_id = _field(diagnosis, "run_id", str, "diagnosis")
    playbook = _field(diagnosis, "playbook", str, "diagnosis")
    sources = {str(k): bool(v) for k, v in
               _field(diagnosis, "data_sources", Mapping, "diagnosis").items()}
    findings = _field(diagnosis, "findings", (list, tuple), "diagnosis")
    rows = [_finding_row(f, i) for i, f in enumerate(findings)]
    if con.execute("SELECT 1 FROM runs WHERE run_id = ?", [run_id]).fetchone() is None:
        raise StoreError(f"run {run_id!r}: not in this store")
    # Naive UTC, like runs.created_at.
    now = datetime.now(UTC).replace(tzinfo=None)
    base = {"run_id": run_id, "playbook": playbook, "created_at": now}
    diag_rows = _arrow(DIAGNOSES, [{**base, "data_sources": _json(sources),
                                    "context": _json(dict(diagnosis.get("context") or {})),
                                    "notes": _json([str(n) for n in diagnosis.get("notes") or []])}])
    finding_rows = _arrow(FINDINGS, [{**base, "finding_idx": i, **r, "data_sources": _json(sources)}
                                     for i, r in enumerate(rows)])
    with transaction(con, f"run {run_id!r}: saving the {playbook} findings failed"):
        for table, arrow in ((DIAGNOSES, diag_rows), (FINDINGS, finding_rows)):
            con.execute(f"DELETE FROM {table.name} WHERE run_id = ? AND playbook = ?",
                        [run_id, playbook])
            insert_arrow(con, table.name, [n for n, _ in table.columns], arrow)
    return len(rows)


def load_diagnoses(con: duckdb.DuckDBPyConnection, run_id: str,
                   playbook: str | None = None) -> list[StoredDiagnosis]:
    """The stored diagnoses of `run_id` (one per playbook, by playbook name), findings in the
    order they were stored. Empty when the run was never diagnosed."""
    where, params = "run_id = ?", [run_id]
    if playbook is not None:
        where, params = where + " AND playbook = ?", [run_id, playbook]
    heads = con.execute(
        f"SELECT playbook, created_at, data_sources, context, notes FROM diagnoses "
        f"WHERE {where} ORDER BY playbook", params).fetchall()
    rows = con.execute(
        f"SELECT playbook, verdict, title, severity, confidence, summary, next_actions, evidence, "
        f"data_sources FROM findings WHERE {where} ORDER BY playbook, finding_idx", params).fetchall()
    by_playbook: dict[str, list[dict[str, Any]]] = {}
    for pb, verdict, title, severity, conf, summary, actions, evidence, sources in rows:
        by_playbook.setdefault(pb, []).append({
            "verdict": verdict, "title": title, "severity": severity, "confidence": conf,
            "summary": summary, "next_actions": json.loads(actions),
            "evidence": json.loads(evidence), "data_sources": json.loads(sources)})
    return [StoredDiagnosis(run_id, pb, created, json.loads(sources), json.loads(context),
                            json.loads(notes), by_playbook.get(pb, []))
            for pb, created, sources, context, notes in heads]
