"""The damage a finding owns, in what users feel: its share of the run's p99 tail.

The run's tail is loaded once: every token gap at or above the run's p99 ITL (with the time
span it covered and its request) and every request at or above the p99 TTFT (send to first
token), plus the requests that never got a token or failed, and the requests past the run's
SLO. A finding's scope (time windows, a replica, a set of requests; see `Finding.scope`)
selects its part: a gap counts when it overlaps a window, a TTFT when the wait from send to
first token does. A finding without a scope is about the whole run: its damage is not
measured (it has no part of the tail to own) and it ranks after the findings that do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import duckdb
import numpy as np

from playbooks.sql import fetch_numpy, fetch_one

TAIL_SQL = """
WITH g AS (
  SELECT i.request_idx, i.t_ns, i.itl_ms, r.replica
  FROM itl i JOIN requests r USING (run_id, request_idx)
  WHERE i.run_id = $run_id AND r.phase = 'measure' AND i.itl_ms IS NOT NULL
), p AS (SELECT quantile_cont(itl_ms, 0.99) AS p99, median(itl_ms) AS p50 FROM g)
SELECT g.request_idx, (g.t_ns - g.itl_ms * 1e6) / 1e9 AS start_s, g.t_ns / 1e9 AS end_s,
       g.itl_ms, g.itl_ms - p.p50 AS excess_ms, coalesce(g.replica, '') AS replica
FROM g, p WHERE g.itl_ms >= p.p99
"""
TTFT_SQL = """
WITH r AS (
  SELECT r.request_idx, r.send_ns, r.first_content_ns, coalesce(r.replica, '') AS replica,
         (r.first_content_ns - r.send_ns) / 1e6 AS ttft_ms
  FROM requests r WHERE r.run_id = $run_id AND r.phase = 'measure' AND r.error_class IS NULL
    AND r.first_content_ns IS NOT NULL
), p AS (SELECT quantile_cont(ttft_ms, 0.99) AS p99 FROM r)
SELECT r.request_idx, r.send_ns / 1e9 AS start_s, r.first_content_ns / 1e9 AS end_s, r.ttft_ms,
       r.replica
FROM r, p WHERE r.ttft_ms >= p.p99
"""
LOST_SQL = """
SELECT request_idx, send_ns / 1e9 AS start_s,
       coalesce(end_ns, last_chunk_ns, send_ns) / 1e9 AS end_s, coalesce(replica, '') AS replica
FROM requests
WHERE run_id = $run_id AND phase = 'measure' AND (error_class IS NOT NULL OR first_content_ns IS NULL)
"""
RUN_SQL = """
SELECT count(*) FILTER (phase = 'measure') AS measured,
       max(coalesce(end_ns, last_chunk_ns, send_ns)) / 1e9 AS end_s
FROM requests WHERE run_id = $run_id
"""


@dataclass
class _Part:
    request_idx: np.ndarray
    start_s: np.ndarray
    end_s: np.ndarray
    replica: np.ndarray
    excess_ms: np.ndarray | None = None

    def select(self, scope: dict[str, Any], run_end_s: float) -> np.ndarray:
        keep = np.ones(self.request_idx.size, dtype=bool)
        if scope.get("replica") is not None:
            keep &= self.replica == str(scope["replica"])
        if scope.get("requests") is not None:
            keep &= np.isin(self.request_idx, np.asarray(scope["requests"], dtype=np.int64))
        windows = scope.get("windows_s")
        if windows:
            hit = np.zeros(keep.size, dtype=bool)
            for lo, hi in windows:
                hi = run_end_s if hi is None else hi
                hit |= (self.start_s <= hi) & (self.end_s >= lo)
            keep &= hit
        return keep


@dataclass
class RunTail:
    itl: _Part
    ttft: _Part
    lost: _Part
    measured: int
    end_s: float
    sql: dict[str, str]

    def damage(self, scope: dict[str, Any]) -> dict[str, Any] | None:
        """The scope's share of the p99 ITL gaps and p99 TTFTs, the requests lost in it, and the
        time its tail gaps added over the median gap; None for a whole-run finding."""
        if not scope:
            return None
        g, t, lost = (p.select(scope, self.end_s) for p in (self.itl, self.ttft, self.lost))
        excess = self.itl.excess_ms[g] if self.itl.excess_ms is not None else np.zeros(0)
        out = {
            "itl_p99_share": _share(g), "ttft_p99_share": _share(t),
            "requests_lost": int(lost.sum()),
            "lost_share": round(float(lost.sum()) / self.measured, 4) if self.measured else None,
            "tail_time_added_s": round(float(np.clip(excess, 0, None).sum()) / 1e3, 3),
        }
        shares = [share for k in ("itl_p99_share", "ttft_p99_share", "lost_share")
                  if (share := out[k]) is not None]
        out["score"] = max(shares) if shares else None
        return out


def _share(mask: np.ndarray) -> float | None:
    return round(float(mask.mean()), 4) if mask.size else None


def _part(con: duckdb.DuckDBPyConnection, sql: str, run_id: str, excess: bool) -> tuple[str, _Part]:
    text, c = fetch_numpy(con, sql, run_id=run_id)

    def col(name: str, dtype: Any) -> np.ndarray:
        v = c[name]
        return np.asarray(v.filled(0) if np.ma.isMaskedArray(v) else v, dtype=dtype)

    return text, _Part(col("request_idx", np.int64), col("start_s", float), col("end_s", float),
                       np.asarray(c["replica"], dtype=object).astype(str),
                       col("excess_ms", float) if excess else None)


def load_tail(con: duckdb.DuckDBPyConnection, run_id: str) -> RunTail:
    sql: dict[str, str] = {}
    sql["itl_tail"], itl = _part(con, TAIL_SQL, run_id, True)
    sql["ttft_tail"], ttft = _part(con, TTFT_SQL, run_id, False)
    sql["lost_requests"], lost = _part(con, LOST_SQL, run_id, False)
    sql["run"], (measured, end_s) = fetch_one(con, RUN_SQL, run_id=run_id)
    return RunTail(itl, ttft, lost, int(measured or 0), float(end_s or 0.0), sql)
