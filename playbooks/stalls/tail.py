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
    p99_clean_ms: float = float("nan")  # p99 of the gaps in no stall (at or below the threshold)

    @property
    def p99_gain(self) -> float:
        """How many times this group raises p99 ITL: the larger of p99 over p99 without the
        group, and the group's share of the rise all stalls make over the clean p99,
        (p99 / clean p99) ** share. The first is exact when the group is the only stall
        source; when another fills the tail too, removing either alone leaves p99 where it
        was (the other still fills it), yet each holds its share of the gaps that set p99.
        Shares of a ratio compose by powers, so the gains of groups that share the tail
        multiply up to the whole rise, and a sole source (share 1) gets all of it."""
        removed = self.p99_ms / self.p99_without_ms if self.p99_without_ms > 0 else 1.0
        rise = self.p99_ms / self.p99_clean_ms if self.p99_clean_ms > 0 else 1.0
        return max(removed, max(rise, 1.0) ** self.tail_share, 1.0)


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
        clean = self.itl[~big]
        self.p99_clean = float(np.quantile(clean, 0.99)) if len(clean) else float("nan")
        # The streaming span the pauses are weighed against: first to last gap end.
        self.span_s = float(t.max() - t.min()) / 1e9 if len(t) else 0.0

    def tail(self, members: np.ndarray) -> Tail:
        """`members`: indices of the events in the group."""
        in_group = np.isin(self.event, members) & (self.event >= 0)
        rest = self.itl[~in_group]
        top = self.itl >= self.p99
        return Tail(
            p99_ms=self.p99,
            p99_without_ms=float(np.quantile(rest, 0.99)) if len(rest) else float("nan"),
            tail_share=float(np.mean(in_group[top])) if top.any() else 0.0,
            gaps_in_events=int(in_group.sum()), sql=self.sql, p99_clean_ms=self.p99_clean)


def tokens_before(con: duckdb.DuckDBPyConnection, run_id: str, times_ns: np.ndarray) -> np.ndarray:
    """Output tokens the client had received by each time: the clock that allocation-driven
    pauses (garbage collection) follow."""
    _, cols = fetch_numpy(con, TOKENS_SQL, run_id=run_id)
    return np.searchsorted(np.asarray(cols["t_ns"], dtype=np.int64), times_ns, side="left")
