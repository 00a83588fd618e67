"""Playbook `hang`: which rank is behind or mismatched, on which collective, and where every
rank waits. Runbook: playbooks/hang/hang.md.

Order of checks (the runbook's): what was captured of every rank -> progress per rank and
process group (last collective enqueued and completed) -> the stuck collective and who
never entered it -> the analyzer's match checks per sequence id (type, sizes, dtypes,
state) -> members without a dump (dead or silent ranks) -> where each rank's collective
thread waits (stacks) -> all ranks inside one collective (transport).
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb

from playbooks.findings import Diagnosis
from playbooks.hang.desync import find_mismatches_in_store
from playbooks.hang.findings import (
    HISTORY_SQL,
    STUCK_SQL,
    all_ranks_stuck_finding,
    behind_finding,
    mismatch_finding,
    missing_rank_finding,
    stacks_only_finding,
)
from playbooks.hang.load import RANKS_SQL, StoredCapture, load_capture
from playbooks.hang.progress import GroupProgress, group_progress
from playbooks.hang.waits import rank_waits
from playbooks.sql import render

DEFAULT_MIN_WAIT_S = 1.0


@dataclass
class HangOptions:
    # A collective pending for less than this at the dump is a healthy engine mid-step.
    min_wait_s: float = DEFAULT_MIN_WAIT_S

    def validate(self) -> None:
        if not self.min_wait_s >= 0:
            raise ValueError(f"--min-wait must be >= 0 seconds, got {self.min_wait_s:g}")


def diagnose_hang(con: duckdb.DuckDBPyConnection, capture_ref: str,
                  options: HangOptions | None = None) -> Diagnosis:
    opts = options or HangOptions()
    opts.validate()
    cap = load_capture(con, capture_ref)
    dumps = [r for r, i in cap.ranks.items() if i.dump_status == "ok"]
    stacks_ok = [r for r, i in cap.ranks.items() if i.stack_status == "ok"]
    diag = Diagnosis("hang", cap.run_id or "", {
        "flight_recorder": bool(dumps), "stacks": bool(stacks_ok)})
    diag.notes.extend(cap.notes)
    for r, info in sorted(cap.ranks.items()):
        if info.stack_status not in ("ok", "not_requested"):
            diag.notes.append(f"rank {r}: no stacks: {info.stack_error or info.stack_status}")
    progress_sql, groups = group_progress(con, cap)
    stacks_sql, waits = rank_waits(con, cap)
    ranks_sql = render(RANKS_SQL, capture_id=cap.capture_id)
    members = {g.pg_name: g.members for g in groups}
    mismatches = find_mismatches_in_store(con, cap.capture_id, members)
    checks: list[str] = [f"captured: {len(dumps)} dump(s), {len(stacks_ok)} stack(s) of "
                         f"{len(cap.ranks)} rank(s)"]
    for g in groups:
        _group(diag, g, cap.capture_id, waits, progress_sql, stacks_sql, ranks_sql, opts,
               [m for m in mismatches if m.pg_name == g.pg_name], cap.ranks, checks)
    if not dumps and waits:
        f = stacks_only_finding(waits, stacks_sql)
        checks.append("no dumps: stacks alone" + (f" -> {f.verdict}" if f else ": nothing stands out"))
        if f:
            diag.findings.append(f)
    window = _capture_window(con, cap, max((g.max_wait_s or 0.0 for g in groups), default=0.0))
    for f in diag.findings:
        if window is not None and not f.scope:
            f.scope = {"windows_s": window}
    diag.context = {
        "capture_id": cap.capture_id, "capture_source": cap.source, "capture_target": cap.target,
        "order_of_checks": checks,
        "no_findings": ("No findings: every rank completed every collective it entered, or "
                        "what is pending is younger than --min-wait, and the calls match."),
        "ranks": [{"rank": r, "pid": info.pid, "alive": info.alive, "dump": info.dump_status,
                   "stacks": info.stack_status,
                   **({"last_enqueued": {g.pg_name: g.ranks[r].last_enqueued for g in groups if r in g.ranks},
                       "last_completed": {g.pg_name: g.ranks[r].last_completed for g in groups if r in g.ranks}}),
                   "waits": waits[r].describe() if r in waits else None}
                  for r, info in sorted(cap.ranks.items())],
    }
    return diag


CAPTURE_TIME_SQL = """
SELECT r.t0_unix_ns,
       (SELECT max(greatest(coalesce(h.dumped_at_ns, 0), coalesce(h.stacks_at_ns, 0)))
        FROM hang_ranks h WHERE h.capture_id = $capture_id) AS taken_ns
FROM runs r WHERE r.run_id = $run_id
"""


def _capture_window(con: duckdb.DuckDBPyConnection, cap: StoredCapture,
                    waited_s: float) -> list[list[float]] | None:
    """When, on the linked run's axis, what the capture shows was happening: from the start
    of the longest pending wait to the capture (so the triage joins it with what the client
    saw at those seconds). None without a linked run or times."""
    if not cap.run_id:
        return None
    row = con.execute(render(CAPTURE_TIME_SQL, capture_id=cap.capture_id, run_id=cap.run_id)).fetchone()
    if not row or row[0] is None or not row[1]:
        return None
    at = (int(row[1]) - int(row[0])) / 1e9
    return [[round(max(at - waited_s, 0.0), 3), round(at, 3)]]


def _group(diag: Diagnosis, g: GroupProgress, cid: str, waits: dict, progress_sql: str,
           stacks_sql: str, ranks_sql: str, opts: HangOptions, mismatches: list,
           ranks: dict, checks: list[str]) -> None:
    pg = g.pg_name
    stuck_sql = render(STUCK_SQL, capture_id=cid, pg_name=pg, seq=g.stuck_seq or 0)
    long_wait = g.max_wait_s is not None and g.max_wait_s >= opts.min_wait_s
    if g.stuck_seq is None:
        checks.append(f"group {pg}: every rank completed every collective it enqueued "
                      f"(last #{max(p.last_completed for p in g.ranks.values())})")
    else:
        checks.append(f"group {pg}: stuck at #{g.stuck_seq}; behind {g.behind or '-'}, waiting "
                      f"{g.waiting or '-'}, finished {g.finished or '-'}, no dump "
                      f"{g.undumped or '-'}; longest wait "
                      + (f"{g.max_wait_s:.3f} s" if g.max_wait_s is not None else "unknown"))
    for m in mismatches:
        checks.append(f"group {pg}: #{m.seq} {m.kind} on ranks {m.culprits} ({m.how_named})")
        hist = render(HISTORY_SQL, capture_id=cid, pg_name=pg, seq=m.seq)
        diag.findings.append(mismatch_finding(m, g, waits, render(
            STUCK_SQL, capture_id=cid, pg_name=pg, seq=m.seq), hist, stacks_sql))
    if not mismatches:
        checks.append(f"group {pg}: the analyzer's checks (type, sizes, dtypes) pass on every "
                      "sequence id all dumps hold")
    mismatch_at_stuck = any(m.seq == g.stuck_seq for m in mismatches)
    if g.undumped:
        diag.findings.append(missing_rank_finding(g, ranks, ranks_sql))
    if g.stuck_seq is None or mismatch_at_stuck:
        return
    if not long_wait:
        if g.max_wait_s is not None:
            diag.notes.append(f"group {pg}: collective #{g.stuck_seq} was in flight for "
                              f"{g.max_wait_s * 1e3:.0f} ms at the dump, under --min-wait "
                              f"{opts.min_wait_s:g} s: an engine between steps, not a hang")
        return
    if g.behind:
        diag.findings.append(behind_finding(g, waits, progress_sql, stuck_sql, stacks_sql, ranks))
    elif g.waiting and not g.undumped:
        diag.findings.append(all_ranks_stuck_finding(g, waits, progress_sql, stuck_sql, stacks_sql))
