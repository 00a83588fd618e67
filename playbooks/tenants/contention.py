"""Each tenant's share of the engine while tenants competed for it, against the share it was
entitled to.

Over a whole run every request is served sooner or later, so a tenant's share of the engine
over the run is its demand whatever the scheduler did. What the scheduler decides is who is
served while several wait. So the shares are taken over the contended time: the instants at
which at least two tenants had a request waiting for its first token (sent, no first token
yet: queued or in prefill). There a fair scheduler gives each waiting tenant weight w over
the waiting tenants' total weight (its entitlement); FCFS gives whoever's requests came first.

Work is put on the time axis as it happened on the client's view: a request's prefill at its
first token, its decode spread evenly over its decode span. A tenant's contended share is its
work inside the contended time over all work there. Its uncertainty is the spread of the
share across B equal slices of the contended time (batch means: the standard error is the
slices' standard deviation over sqrt(B)), so a run whose requests come in few large lumps
says so in a wider error.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import duckdb
import numpy as np

from playbooks.sql import fetch
from playbooks.tenants.accounting import BACKLOG_SQL, Priced

SLICES = 8  # batch means; each slice still holds many requests in a test-sized run


@dataclass
class Contention:
    seconds: float                               # contended time
    intervals: list[tuple[float, float]]         # ns on the client's clock
    share: dict[str | None, float] = field(default_factory=dict)      # of the work in it
    entitled: dict[str | None, float] = field(default_factory=dict)   # time-averaged weight share
    share_se: dict[str | None, float] = field(default_factory=dict)
    sql: str = ""


def _contended(con: duckdb.DuckDBPyConnection, run_id: str,
               weights: dict[str, float]) -> tuple[str, list[tuple[float, float]], dict[str | None, float]]:
    """The contended intervals, and each tenant's entitlement integrated over them (ns)."""
    sql, rows = fetch(con, BACKLOG_SQL, run_id=run_id)
    events: list[tuple[float, int, str | None]] = []
    for tenant, send, until in rows:
        who = None if tenant is None else str(tenant)
        if until > send:
            events += [(float(send), 1, who), (float(until), -1, who)]
    events.sort(key=lambda e: (e[0], e[1]))  # at one instant a first token leaves before a send
    waiting: dict[str | None, int] = {}
    intervals: list[tuple[float, float]] = []
    entitled: dict[str | None, float] = {}
    start: float | None = None
    prev = 0.0
    for t, d, tenant in events:
        backlogged = [u for u, c in waiting.items() if c > 0]
        if len(backlogged) >= 2 and t > prev:
            total_w = sum(_w(weights, u) for u in backlogged)
            for u in backlogged:
                entitled[u] = entitled.get(u, 0.0) + (t - prev) * _w(weights, u) / total_w
        waiting[tenant] = waiting.get(tenant, 0) + d
        now = sum(1 for c in waiting.values() if c > 0) >= 2
        if now and start is None:
            start = t
        elif not now and start is not None:
            if t > start:
                intervals.append((start, t))
            start = None
        prev = t
    return sql, intervals, entitled


def _w(weights: dict[str, float], tenant: str | None) -> float:
    return weights.get(tenant, 1.0) if tenant is not None else 1.0


def _clock(starts: np.ndarray, ends: np.ndarray, cum: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Contended time before each t: the sorted intervals [starts, ends), `cum` the contended
    time before each interval."""
    k = np.searchsorted(starts, t, side="right") - 1
    kk = np.maximum(k, 0)
    return np.where(k >= 0, cum[kk] + np.clip(t - starts[kk], 0.0, ends[kk] - starts[kk]), 0.0)


def _inside(starts: np.ndarray, ends: np.ndarray, t: np.ndarray) -> np.ndarray:
    k = np.searchsorted(starts, t, side="right") - 1
    return (k >= 0) & (t < ends[np.maximum(k, 0)])


def _work_in(priced: Priced, lo: float, hi: float, starts: np.ndarray, ends: np.ndarray,
             cum: np.ndarray) -> np.ndarray:
    """Each request's work inside [lo, hi) and the contended time: its prefill if its first
    token falls there, the part of its decode span that does."""
    first, last = priced.first_ns, priced.last_ns
    pre = priced.prefill_s * (_inside(starts, ends, first) & (first >= lo) & (first < hi))
    a, b = np.clip(first, lo, hi), np.clip(last, lo, hi)
    span = last - first
    frac = np.where(span > 0, (_clock(starts, ends, cum, b) - _clock(starts, ends, cum, a))
                    / np.where(span > 0, span, 1.0), 0.0)
    return pre + priced.decode_s * frac


def contention(con: duckdb.DuckDBPyConnection, run_id: str, priced: Priced,
               weights: dict[str, float] | None = None, slices: int = SLICES) -> Contention:
    sql, intervals, entitled_ns = _contended(con, run_id, weights or {})
    seconds = sum(b - a for a, b in intervals) / 1e9
    out = Contention(seconds, intervals, sql=sql)
    if not intervals or not priced.tenant:
        return out
    starts = np.array([a for a, _ in intervals])
    ends = np.array([b for _, b in intervals])
    cum = np.concatenate([[0.0], np.cumsum(ends - starts)])
    names = np.asarray([t if t is not None else "\0" for t in priced.tenant], dtype=object)
    tenants = sorted(set(priced.tenant) | set(entitled_ns), key=lambda t: (t is not None, t or ""))
    total_ns = float(cum[-1])
    out.entitled = {t: entitled_ns.get(t, 0.0) / total_ns for t in tenants}

    def shares(lo: float, hi: float) -> dict[str | None, float] | None:
        work = _work_in(priced, lo, hi, starts, ends, cum)
        total = float(work.sum())
        if total <= 0:
            return None
        return {t: float(work[names == (t if t is not None else "\0")].sum()) / total
                for t in tenants}

    whole = shares(-np.inf, np.inf)
    if whole is None:
        return out
    out.share = whole
    # Slices of equal contended time: where the contended clock crosses k/B of the total.
    clock_at = np.concatenate([cum[:-1], cum[1:]])
    times_at = np.concatenate([starts, ends])
    order = np.argsort(clock_at, kind="stable")
    marks = [float(np.interp(total_ns * k / slices, clock_at[order], times_at[order]))
             for k in range(slices + 1)]
    marks[-1] = np.inf
    per = [s for s in (shares(marks[k], marks[k + 1]) for k in range(slices)) if s is not None]
    for t in tenants:
        vals = np.array([s[t] for s in per])
        out.share_se[t] = float(vals.std(ddof=1) / np.sqrt(vals.size)) if vals.size >= 2 else 1.0
    return out
