"""The host's own pauses of the bundled engine, from the engine's step log.

A busy host (a CI neighbour) really stops the engine now and then, and the stall playbook is
right to find that. The reference engine labels a step the host ran late `host-late`
(reference_engine/faults.py): the lab's truth that nobody injected that pause. A test holds a
playbook to the cause it injected and checks every other pause against that truth: a pause
that lies on no host-late step is not the host's and stays in (and fails the test).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import duckdb

# On the run's axis, in seconds; the last run of the store.
HOST_LATE_SQL = """
SELECT (s.start_s * 1e9 - r.t0_monotonic_ns) / 1e9 AS s, (s.end_s * 1e9 - r.t0_monotonic_ns) / 1e9 AS e
FROM engine_steps s JOIN runs r USING (run_id)
WHERE s.run_id = (SELECT max(run_id) FROM runs) AND s.fault LIKE '%host-late%'
"""
# A token reaches the client shortly after its step ended: how far a pause's window may lie
# past the step that made it.
DELIVERY_S = 0.02
STALL_VERDICTS = frozenset({"periodic_engine_stall", "engine_wide_stall", "preemption_stall",
                            "private_stall"})


# The host's pauses of one run ($run_id), one row per host-late step: when the step ended, on
# the run's axis (e_ns), and what the host added to it (h, seconds): its length beyond the median
# step of its shape (prefill tokens, decode sequences) that the host did not delay. A shape seen
# only in host-late steps counts whole. A host-late step is a stall the engine kept whole, not
# caught up (it woke 20 ms or more past its device deadline).
HOST_PAUSES_SQL = """
WITH s AS (
  SELECT prefill_tokens, decode_seqs, end_s - start_s AS d,
         coalesce(fault, '') LIKE '%host-late%' AS late,
         CAST(round(end_s * 1e9) AS BIGINT) - (SELECT t0_monotonic_ns FROM runs WHERE run_id = $run_id) AS e_ns
  FROM engine_steps WHERE run_id = $run_id
), typical AS (
  SELECT prefill_tokens, decode_seqs, median(d) AS m FROM s WHERE NOT late GROUP BY ALL
)
SELECT e_ns, greatest(d - coalesce(t.m, 0), 0) AS h
FROM s LEFT JOIN typical t USING (prefill_tokens, decode_seqs) WHERE s.late
"""


def host_pauses_sql(run_id: str) -> str:
    """HOST_PAUSES_SQL for one run, to nest in a query of the caller's."""
    return HOST_PAUSES_SQL.replace("$run_id", "'" + run_id.replace("'", "''") + "'")


def host_late_steps(db: Path) -> list[tuple[float, float]]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return [(float(a), float(b)) for a, b in con.execute(HOST_LATE_SQL).fetchall()]
    finally:
        con.close()


def the_hosts(windows: Sequence[Sequence[float]] | None, late: list[tuple[float, float]]) -> bool:
    """True when a stall finding has pauses (`scope["windows_s"]`) and every one lies on a
    step the engine marks host-late."""
    return bool(late and windows) and all(
        any(s < we + DELIVERY_S and e > ws - DELIVERY_S for s, e in late)
        for ws, we in windows or [])


def hosts_stall(verdict: str, scope: dict | None, late: list[tuple[float, float]]) -> bool:
    return verdict in STALL_VERDICTS and the_hosts((scope or {}).get("windows_s"), late)
