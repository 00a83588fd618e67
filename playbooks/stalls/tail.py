"""How much of the ITL tail a group of stall events owns, and where events sit in other
clocks (steps, output tokens) for the periodicity tests. Vectorised over all gaps."""

from __future__ import annotations

from dataclasses import dataclass

import duckdb
import numpy as np

from playbooks.sql import fetch_numpy
from playbooks.stalls.events import Events, Gaps

TOKENS_SQL = "SELECT t_ns FROM chunks WHERE run_id = $run_id AND content ORDER BY t_ns"


@dataclass
class Tail:
    p99_ms: float
    p99_without_ms: float
    tail_share: float        # share of gaps >= p99 that belong to the events
    gaps_in_events: int
    sql: str


class GapIndex:
    """Every non-coalesced gap with the stall event it belongs to (-1 for none)."""

    def __init__(self, gaps: Gaps, ev: Events, threshold_ms: float) -> None:
        self.sql, self.itl, t = gaps.sql, gaps.itl_ms, gaps.t_ns
        self.event = np.full(len(t), -1, dtype=np.int64)
        big = self.itl > threshold_ms
        if len(ev):
            # Events are disjoint ranges of gap end times [we, last_end], ordered by we.
            idx = np.searchsorted(ev.we, t[big], side="right") - 1
            ok = (idx >= 0) & (t[big] <= ev.last_end[np.clip(idx, 0, None)])
            sub = np.where(ok, idx, -1)
            self.event[np.flatnonzero(big)] = sub
        self.p99 = float(np.quantile(self.itl, 0.99)) if len(self.itl) else float("nan")

    def tail(self, members: np.ndarray) -> Tail:
        """`members`: indices of the events in the group."""
        in_group = np.isin(self.event, members) & (self.event >= 0)
        rest = self.itl[~in_group]
        top = self.itl >= self.p99
        return Tail(
            p99_ms=self.p99,
            p99_without_ms=float(np.quantile(rest, 0.99)) if len(rest) else float("nan"),
            tail_share=float(np.mean(in_group[top])) if top.any() else 0.0,
            gaps_in_events=int(in_group.sum()), sql=self.sql)


def tokens_before(con: duckdb.DuckDBPyConnection, run_id: str, times_ns: np.ndarray) -> np.ndarray:
    """Output tokens the client had received by each time: the clock that allocation-driven
    pauses (garbage collection) follow."""
    _, cols = fetch_numpy(con, TOKENS_SQL, run_id=run_id)
    return np.searchsorted(np.asarray(cols["t_ns"], dtype=np.int64), times_ns, side="left")
