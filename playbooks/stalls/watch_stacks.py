"""What the live watch of `infbench run` captured while the engine was stopped: each captured
thread's innermost frame of its own code (below it, the standard library it waits in), read
from `watch_triggers` and the hang capture it links (`hang_stacks`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import duckdb

from playbooks.sql import fetch

WATCH_STACKS_SQL = r"""
WITH frames AS (
  SELECT w.t_s, w.hang_capture_id AS capture_id, s.pid, s.thread_id, s.thread_name, s.depth,
         s.function, s.filename, s.line,
         -- the standard library (not site-packages): where threads wait, not why
         (regexp_matches(coalesce(s.filename, ''), '/lib/python3\.[0-9]+/')
          AND coalesce(s.filename, '') NOT LIKE '%-packages/%') AS stdlib
  FROM watch_triggers w JOIN hang_stacks s ON s.capture_id = w.hang_capture_id
  WHERE w.run_id = $run_id AND w.kind = 'engine_stopped'
), own AS (
  SELECT *, row_number() OVER (PARTITION BY capture_id, pid, thread_id ORDER BY depth) AS k
  FROM frames WHERE NOT stdlib
), innermost AS (
  SELECT capture_id, pid, thread_id, function AS waits_in FROM frames WHERE depth = 0
)
SELECT o.t_s, o.capture_id, o.pid, o.thread_name, i.waits_in, o.function, o.filename, o.line
FROM own o JOIN innermost i
  ON i.capture_id = o.capture_id AND i.pid IS NOT DISTINCT FROM o.pid
 AND i.thread_id IS NOT DISTINCT FROM o.thread_id
WHERE o.k = 1
ORDER BY o.t_s, o.pid, o.thread_name
"""


@dataclass
class WatchStacks:
    t_s: float
    capture_id: str
    threads: list[dict[str, Any]]  # pid, thread, waits_in, at (function file:line)
    sql: str

    def describe(self, most: int = 4) -> str:
        parts = [f"{t['thread']} in {t['at']}" + (f" (waiting in {t['waits_in']})"
                                                  if t["waits_in"] != t["function"] else "")
                 for t in self.threads[:most]]
        more = len(self.threads) - most
        return "; ".join(parts) + (f"; {more} more thread(s)" if more > 0 else "")


def watch_stacks(con: duckdb.DuckDBPyConnection, run_id: str) -> WatchStacks | None:
    """The first stacks capture the live watch took at an engine stop, or None."""
    have = con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name IN "
                       "('watch_triggers', 'hang_stacks')").fetchone()
    if not have or have[0] < 2:
        return None
    sql, rows = fetch(con, WATCH_STACKS_SQL, run_id=run_id)
    if not rows:
        return None
    first = rows[0][1]
    threads = [{"pid": r[2], "thread": r[3] or "?", "waits_in": r[4], "function": r[5],
                "at": f"{r[5]} ({_short(r[6])}:{r[7]})"} for r in rows if r[1] == first]
    return WatchStacks(float(rows[0][0]), first, threads, sql)


def _short(path: str | None) -> str:
    """The path from the package down (site-packages/vllm/... -> vllm/...)."""
    if not path:
        return "?"
    if "-packages/" in path:
        return path.split("-packages/", 1)[1]
    return "/".join(path.split("/")[-2:])
