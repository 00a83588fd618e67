"""How far each rank got, per process group, and the collective the group is stuck on.

Per rank and group: the last collective it enqueued (the highest `collective_seq_id` in its
dump) and the last it completed: the higher of `pg_status.last_completed_collective` and the
highest entry that is `completed` or, on gloo, `retired` (gloo's pg_status counter lags
its entries: measured at 13 with entries up to 18 retired). The stuck collective
is the first sequence id some rank has not completed: min(last completed) + 1, when any rank
enqueued it. Ranks that never enqueued it are *behind*: the others wait for them. Ranks
that enqueued it and did not complete it are *waiting*; how long is the dump's time minus
the entry's `time_created_ns` (both Unix ns). A healthy engine dumped mid-step has such a
collective too, for microseconds, so a wait shorter than `min_wait_s` is not a hang.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import duckdb

from playbooks.hang.load import Entry, StoredCapture, entries_at
from playbooks.sql import fetch

PROGRESS_SQL = """
WITH e AS (
  SELECT rank, pg_name, any_value(pg_desc) AS pg_desc, any_value(pg_id) AS pg_id,
         min(collective_seq_id) AS first_seq, max(collective_seq_id) AS last_enqueued,
         max(collective_seq_id) FILTER (WHERE state = 'completed' OR retired) AS last_done,
         count(*) AS entries
  FROM hang_fr_entries
  WHERE capture_id = $capture_id AND NOT coalesce(is_p2p, false)
  GROUP BY rank, pg_name
)
SELECT e.pg_name, e.pg_desc, e.rank, e.first_seq, e.last_enqueued,
       -- the higher of PyTorch's own counter and the entries: gloo's pg_status lags (a rank
       -- with entries 14-18 retired still said 13), and older dumps have no pg_status
       greatest(coalesce(s.last_completed, -1), coalesce(e.last_done, e.first_seq - 1))
         AS last_completed,
       coalesce(s.last_completed >= coalesce(e.last_done, -1), false) AS from_pg_status, e.entries
FROM e LEFT JOIN hang_pg_status s
  ON s.capture_id = $capture_id AND s.rank = e.rank AND s.pg_key = CAST(e.pg_id AS VARCHAR)
ORDER BY e.pg_name, e.rank
"""


@dataclass
class RankProgress:
    rank: int
    first_seq: int
    last_enqueued: int
    last_completed: int
    from_pg_status: bool


@dataclass
class GroupProgress:
    pg_name: str
    pg_desc: str
    members: list[int]
    members_source: str                      # pg_config | single pg_config | ranks captured
    ranks: dict[int, RankProgress]           # members with a dump (absent: no entry = 0)
    undumped: list[int]                      # members whose dump is missing or was refused
    stuck_seq: int | None = None
    behind: list[int] = field(default_factory=list)
    waiting: list[int] = field(default_factory=list)
    finished: list[int] = field(default_factory=list)
    stuck_entries: dict[int, Entry] = field(default_factory=dict)
    waited_s: dict[int, float] = field(default_factory=dict)

    @property
    def max_wait_s(self) -> float | None:
        return max(self.waited_s.values()) if self.waited_s else None

    def values(self) -> dict[str, int | float | str | bool | None]:
        return {"process_group": f"{self.pg_name} ({self.pg_desc})" if self.pg_desc else self.pg_name,
                "members": ",".join(map(str, self.members)), "stuck_seq": self.stuck_seq,
                "behind": ",".join(map(str, self.behind)) or None,
                "waiting": ",".join(map(str, self.waiting)) or None,
                "finished": ",".join(map(str, self.finished)) or None,
                "no_dump": ",".join(map(str, self.undumped)) or None,
                "max_wait_s": round(self.max_wait_s, 3) if self.max_wait_s is not None else None,
                **{f"rank{r}_last_enqueued": p.last_enqueued for r, p in sorted(self.ranks.items())},
                **{f"rank{r}_last_completed": p.last_completed for r, p in sorted(self.ranks.items())}}


def _members(cap: StoredCapture, pg_name: str, seen: list[int]) -> tuple[list[int], str]:
    if cap.groups.get(pg_name):
        return sorted(cap.groups[pg_name] or []), "pg_config"
    known = [g for g in cap.groups.values() if g]
    if len(cap.groups) == 1 and known:
        return sorted(known[0]), "single pg_config"
    return sorted(set(seen) | set(cap.ranks)), "ranks captured"


def group_progress(con: duckdb.DuckDBPyConnection, cap: StoredCapture) -> tuple[str, list[GroupProgress]]:
    sql, rows = fetch(con, PROGRESS_SQL, capture_id=cap.capture_id)
    by_pg: dict[str, tuple[str, dict[int, RankProgress]]] = {}
    for pg, desc, rank, first, last_enq, last_done, from_status, _ in rows:
        by_pg.setdefault(pg, (desc or "", {}))[1][int(rank)] = RankProgress(
            int(rank), int(first), int(last_enq), int(last_done), bool(from_status))
    dumped = {r for r, info in cap.ranks.items() if info.dump_status == "ok"}
    out = []
    for pg, (desc, ranks) in sorted(by_pg.items()):
        members, source = _members(cap, pg, list(ranks))
        for r in members:  # a member that dumped but never entered this group's collectives
            if r in dumped and r not in ranks:
                ranks[r] = RankProgress(r, 0, 0, 0, False)
        g = GroupProgress(pg, desc, members, source,
                          {r: p for r, p in ranks.items() if r in members or r in dumped},
                          [r for r in members if r not in dumped])
        _stuck(con, g, cap)
        out.append(g)
    return sql, out


def _stuck(con: duckdb.DuckDBPyConnection, g: GroupProgress, cap: StoredCapture) -> None:
    if not g.ranks:
        return
    stuck = min(p.last_completed for p in g.ranks.values()) + 1
    if stuck > max(p.last_enqueued for p in g.ranks.values()):
        return  # every rank completed everything it enqueued: nothing pending
    g.stuck_seq = stuck
    entries: dict[int, Entry] = {e.rank: e for e in entries_at(con, cap.capture_id, g.pg_name, stuck)}
    for r, p in sorted(g.ranks.items()):
        if p.last_enqueued < stuck:
            g.behind.append(r)
        elif p.last_completed < stuck:
            g.waiting.append(r)
        else:
            g.finished.append(r)
        e = entries.get(r)
        if e is not None:
            g.stuck_entries[r] = e
            at = cap.ranks[r].dumped_at_ns if r in cap.ranks else None
            if r in g.waiting and at is not None and e.time_created_ns:
                g.waited_s[r] = max(0.0, (at - e.time_created_ns) / 1e9)
