"""`infbench diagnose RUN`: every playbook the run's data allow, one ranked list, one headline.

Each applicable playbook runs as it would alone (its findings keep their evidence, SQL and
next checks). Every finding's damage is then measured on the same ruler, the run's p99 tail
(`damage`); the ranking puts the most severe first and, among equals, what owns the most of
that tail (findings about the whole run, with no part of it to own, after those that do). The headline is the top
warning-or-worse finding; with none, "no problem found". Findings of different playbooks at
the same times or on the same replica are joined into incidents (`incidents`), and each source
of data the run lacked is listed with the question it would have settled (`inventory`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import duckdb

from infbench.store import StoreError, get_run
from playbooks.findings import SEVERITIES, Diagnosis, Finding
from playbooks.registry import PLAYBOOKS, Playbook
from playbooks.stalls import StallOptions
from playbooks.triage.damage import load_tail
from playbooks.triage.incidents import Ranked, join
from playbooks.triage.inventory import missing, take_inventory

NO_PROBLEM = "no problem found"


@dataclass
class TriageOptions:
    min_stall_ms: float = 50.0
    itl_target_ms: float = 50.0
    db: str | None = None  # for the replicas playbook's measurement-plan commands

    def validate(self) -> None:
        StallOptions(itl_target_ms=self.itl_target_ms, min_stall_ms=self.min_stall_ms).validate()


@dataclass
class Triage:
    diagnosis: Diagnosis  # playbook "triage": the ranked findings, headline and incidents in context
    per_playbook: list[Diagnosis]  # each playbook's own diagnosis, as it would save it alone

    @property
    def exit_code(self) -> int:
        return 1 if any(f.severity != "info" for f in self.diagnosis.findings) else 0


def _latest(con: duckdb.DuckDBPyConnection, table: str, key: str, order: str, run_id: str) -> str:
    row = con.execute(f"SELECT {key} FROM {table} WHERE run_id = ? ORDER BY {order} DESC LIMIT 1",
                      [run_id]).fetchone()
    if row is None:
        raise StoreError(f"run {run_id}: no {table} row")
    return str(row[0])


def _subject(con: duckdb.DuckDBPyConnection, pb: Playbook, run_id: str) -> str:
    """What the playbook is given: the run, or the latest record of its kind linked to it."""
    if pb.reads is None:
        return run_id
    return _latest(con, pb.reads.table, pb.reads.key, pb.reads.order, run_id)


def _rank_key(r: tuple[str, Finding, dict[str, Any] | None]) -> tuple[int, float, float, float]:
    """Most severe first; among equals, the larger share of the requests lost (a request that
    never completed is worse than any late token, and a share of lost requests is not on the
    scale of a share of the p99 gaps), then the most damage (whole-run findings, which own no
    part of the tail, after those that do), then the most sure."""
    _, f, dmg = r
    score = dmg.get("score") if dmg else None
    lost = (dmg.get("lost_share") or 0.0) if dmg else 0.0
    return (-SEVERITIES.index(f.severity), -lost, -(score if score is not None else -1.0),
            -f.confidence)


def diagnose_all(con: duckdb.DuckDBPyConnection, run_ref: str,
                 options: TriageOptions | None = None) -> Triage:
    opts = options or TriageOptions()
    opts.validate()
    run = get_run(con, run_ref)
    inv = take_inventory(con, run.run_id, run.config, run.model)
    done: list[Diagnosis] = []
    failed: dict[str, str] = {}
    shared = {"itl_target_ms": opts.itl_target_ms, "min_stall_ms": opts.min_stall_ms,
              "db": opts.db}
    for pb in PLAYBOOKS:
        if pb.name not in inv.run:
            continue
        try:
            done.append(pb.diagnose(con, _subject(con, pb, run.run_id), pb.triage_options(shared)))
        except (ValueError, StoreError, duckdb.Error) as exc:
            failed[pb.name] = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    tail = load_tail(con, run.run_id)
    found = [(d.playbook, f, tail.damage(f.scope)) for d in done for f in d.findings]
    found.sort(key=_rank_key)
    ranked = [Ranked(p, f.verdict, f.severity, f.confidence, f.scope, dmg, i)
              for i, (p, f, dmg) in enumerate(found)]
    incidents = join(ranked, tail.end_s)
    diag = Diagnosis("triage", run.run_id, inv.sources(), [f for _, f, _ in found])
    # where each ranked finding lands in the stored list (which is ordered by severity only)
    stored = {id(f): i for i, f in enumerate(diag.sorted_findings())}
    top = next((r for r in ranked if r.severity != "info"), None)
    diag.context = {
        "headline": _headline(top, found, _cause_of(top, ranked)),
        "ranked": [{"rank": r.index + 1, "playbook": r.playbook, "verdict": r.verdict,
                    "severity": r.severity, "confidence": r.confidence, "damage": r.damage,
                    "incident": r.incident, "title": found[r.index][1].title,
                    "finding": stored[id(found[r.index][1])]} for r in ranked],
        "incidents": [asdict(i) | {"members": [ranked[m].verdict for m in i.members]} for i in incidents],
        "playbooks_run": {**inv.run, **{k: f"failed: {v}" for k, v in failed.items()}},
        "playbooks_skipped": inv.skipped,
        "missing_data": missing(inv, {f.verdict for _, f, _ in found}),
        "inventory": inv.counts,
    }
    diag.context["evidence_sql"] = {"inventory": inv.sql, **tail.sql}
    for name, why in failed.items():
        diag.notes.append(f"the {name} playbook could not run: {why}")
    for d in done:
        diag.notes.extend(f"{d.playbook}: {n}" for n in d.notes)
    return Triage(diag, done)


# What the client sees of an incident, not why: when one of these leads an incident that
# another playbook's finding (a rank behind, a throttled GPU, a full KV pool) joins at the same
# seconds, the headline names that cause, with the damage the symptom measured.
SYMPTOMS = {"engine_stopped", "engine_wide_stall", "periodic_engine_stall", "preemption_stall",
            "private_stall", "replica_slower"}


def _cause_of(top: Ranked | None, ranked: list[Ranked]) -> Ranked | None:
    if top is None or top.verdict not in SYMPTOMS or top.incident is None:
        return None
    return next((r for r in ranked if r.incident == top.incident and r.playbook != top.playbook
                 and r.verdict not in SYMPTOMS and r.severity != "info"), None)


def _headline(top: Ranked | None, found: list[tuple[str, Finding, dict[str, Any] | None]],
              cause: Ranked | None = None) -> dict[str, Any]:
    if top is None:
        return {"text": NO_PROBLEM, "verdict": None, "playbook": None, "severity": "info"}
    f, dmg = found[top.index][1], top.damage
    owns = ""
    if dmg and dmg.get("score") is not None:
        parts = [f"{dmg[k]:.0%} of the {what}" for k, what in (
            ("itl_p99_share", "p99 token gaps"), ("ttft_p99_share", "p99 TTFTs"),
            ("lost_share", "requests (lost)")) if dmg.get(k)]
        owns = f" (owns {', '.join(parts)})" if parts else ""
    if cause is not None:
        c = found[cause.index][1]
        return {"text": f"{c.title}; what users saw: {f.title[0].lower()}{f.title[1:]}{owns}",
                "verdict": c.verdict, "playbook": cause.playbook, "severity": f.severity,
                "damage": dmg, "symptom": {"verdict": f.verdict, "playbook": top.playbook}}
    return {"text": f"{f.title}{owns}", "verdict": f.verdict, "playbook": top.playbook,
            "severity": f.severity, "damage": dmg}
