"""A stored hang capture, read back with SQL (the rendered SQL goes into the evidence).

Everything the playbook knows comes from the hang tables (`docs/store.md`), never from the
probe that wrote them, so a capture attached to an incident is diagnosed the same anywhere.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import duckdb

from playbooks.sql import fetch

CAPTURE_SQL = """
SELECT capture_id, run_id, source, target, world_size, notes, created_at
FROM hang_captures
WHERE capture_id = $ref OR (length($ref) >= 6 AND starts_with(capture_id, $ref))
ORDER BY created_at DESC, capture_id DESC
"""
LAST_CAPTURE_SQL = """
SELECT capture_id, run_id, source, target, world_size, notes, created_at
FROM hang_captures ORDER BY created_at DESC, capture_id DESC LIMIT 1
"""

RANKS_SQL = """
SELECT rank, pid, alive, dump_status, dump_error, dumped_at_ns, stack_status, stack_error,
       stack_source
FROM hang_ranks WHERE capture_id = $capture_id ORDER BY rank
"""

# Group membership per process group, from any rank's pg_config. PyTorch keys pg_config by
# the group's name, which is what entries carry in process_group; a dump whose single
# pg_config key matches no entry (gloo in PyTorch 2.13 writes key '') still names the ranks.
GROUPS_SQL = """
SELECT pg_key, any_value(pg_name) AS pg_name, any_value(pg_desc) AS pg_desc,
       any_value(group_ranks) AS group_ranks, count(DISTINCT group_ranks) AS variants
FROM hang_pg_config WHERE capture_id = $capture_id GROUP BY pg_key ORDER BY pg_key
"""

_ENTRY_COLS = """rank, record_id, pg_id, pg_name, pg_desc, collective_seq_id, op, profiling_name,
       input_sizes, input_dtypes, output_sizes, output_dtypes, input_numel, output_numel,
       state, retired, time_created_ns, thread_id, is_p2p"""

# One sequence id of one group, every rank's entry (a capture can hold half a million
# entries: the playbook reads only the ones it reports).
ENTRIES_AT_SQL = f"""
SELECT {_ENTRY_COLS}
FROM hang_fr_entries
WHERE capture_id = $capture_id AND pg_name = $pg_name AND collective_seq_id = $seq
  AND NOT coalesce(is_p2p, false)
ORDER BY rank, record_id
"""

# The thread that issued each rank's latest collective (its pthread id, as py-spy prints it).
FR_THREADS_SQL = """
SELECT rank, arg_max(thread_id, record_id) FROM hang_fr_entries
WHERE capture_id = $capture_id AND thread_id IS NOT NULL GROUP BY rank ORDER BY rank
"""


@dataclass
class RankInfo:
    rank: int
    pid: int | None
    alive: bool | None
    dump_status: str
    dump_error: str | None
    dumped_at_ns: int | None
    stack_status: str
    stack_error: str | None
    stack_source: str | None


@dataclass
class Entry:
    rank: int
    record_id: int
    pg_id: int | None
    pg_name: str
    pg_desc: str
    seq: int
    op: str
    profiling_name: str
    input_sizes: list[list[int]]
    input_dtypes: list[str]
    output_sizes: list[list[int]]
    output_dtypes: list[str]
    input_numel: int
    output_numel: int
    state: str
    retired: bool | None
    time_created_ns: int | None
    thread_id: str | None
    is_p2p: bool

    @property
    def done(self) -> bool:
        """Finished: NCCL marks the entry completed; gloo leaves it scheduled and retires it."""
        return self.state == "completed" or bool(self.retired)

    def signature(self) -> tuple[Any, ...]:
        return (self.op, json.dumps(self.input_sizes), json.dumps(self.output_sizes),
                json.dumps(self.input_dtypes), json.dumps(self.output_dtypes))

    def describe(self) -> str:
        dt = ",".join(sorted(set(self.input_dtypes))) or "-"
        return f"{self.op} {self.input_sizes}->{self.output_sizes} {dt}"


@dataclass
class StoredCapture:
    capture_id: str
    run_id: str | None
    source: str
    target: str
    world_size: int | None
    notes: list[str]
    ranks: dict[int, RankInfo]
    groups: dict[str, list[int] | None]       # pg_config key -> member ranks
    fr_threads: dict[int, str]                # rank -> thread that issued its collectives
    sql: dict[str, str] = field(default_factory=dict)


def resolve_capture(con: duckdb.DuckDBPyConnection, ref: str) -> tuple[Any, ...]:
    if ref in ("last", "latest"):
        _, rows = fetch(con, LAST_CAPTURE_SQL)
    else:
        _, rows = fetch(con, CAPTURE_SQL, ref=ref)
        rows = [r for r in rows if r[0] == ref] or rows
    if not rows:
        raise ValueError(f"capture {ref!r}: no such hang capture in this store")
    if len(rows) > 1:
        raise ValueError(f"capture {ref!r}: ambiguous prefix, matches {len(rows)} captures")
    return rows[0]


def _ranks(text: str | None) -> list[int] | None:
    if not text:
        return None if text is None else []
    return [int(x) for x in text.split(",")]


def load_capture(con: duckdb.DuckDBPyConnection, ref: str) -> StoredCapture:
    cid, run_id, source, target, world, notes, _ = resolve_capture(con, ref)
    sql: dict[str, str] = {}
    sql["ranks"], rrows = fetch(con, RANKS_SQL, capture_id=cid)
    sql["groups"], grows = fetch(con, GROUPS_SQL, capture_id=cid)
    sql["fr_threads"], trows = fetch(con, FR_THREADS_SQL, capture_id=cid)
    ranks = {int(r[0]): RankInfo(int(r[0]), r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8])
             for r in rrows}
    groups = {str(g[0]): _ranks(g[3]) for g in grows}
    return StoredCapture(cid, run_id, source, target, world, json.loads(notes or "[]"), ranks,
                         groups, {int(r): str(t) for r, t in trows}, sql)


def _entry(e: tuple[Any, ...]) -> Entry:
    return Entry(rank=int(e[0]), record_id=int(e[1]), pg_id=e[2], pg_name=e[3] or "",
                 pg_desc=e[4] or "", seq=int(e[5]), op=e[6] or "", profiling_name=e[7] or "",
                 input_sizes=json.loads(e[8]), input_dtypes=json.loads(e[9]),
                 output_sizes=json.loads(e[10]), output_dtypes=json.loads(e[11]),
                 input_numel=int(e[12] or 0), output_numel=int(e[13] or 0), state=e[14],
                 retired=e[15], time_created_ns=e[16], thread_id=e[17], is_p2p=bool(e[18]))


def entries_at(con: duckdb.DuckDBPyConnection, capture_id: str, pg_name: str,
               seq: int) -> list[Entry]:
    """Every rank's entry at one sequence id of one group (a rank holding two: its first)."""
    _, rows = fetch(con, ENTRIES_AT_SQL, capture_id=capture_id, pg_name=pg_name, seq=seq)
    out: dict[int, Entry] = {}
    for row in rows:
        out.setdefault(int(row[0]), _entry(row))
    return list(out.values())
