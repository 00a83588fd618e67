"""Stall events from the client token timeline, and the cross-request test for each.

A stall gap is a gap between two content chunks of one request far above the run's typical
ITL (threshold from the median and the MAD, so it scales with the run, not with one case),
judged as the itl view measures it: the gap before a read spread over the events it delivered.
Gaps that end together (all streams resumed by the same engine step) form one event. For
each event the cross-request test asks: of the requests streaming across the event, did any
receive a token during it? None -> the whole engine paused (engine-wide); some -> the pause
was private to the stalled requests (preemption and recompute, or a slow reader). The step
log, when present, says what the engine was doing at that wall time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import duckdb
import numpy as np

from playbooks.sql import fetch_numpy, fetch_one

# MAD -> standard deviation for normal data; the stall threshold is this many sigmas up...
_MAD_SIGMA = 1.4826
_SIGMAS = 10.0
# ...and never below this multiple of the median (below 3x it is batch-composition noise)...
_MIN_RATIO = 3.0
# ...nor below this many ms: a shorter pause is not a visible stutter at reading speed
# (ITL SLOs start around 50-100 ms). `min_stall_ms` overrides it for small fast models.
DEFAULT_MIN_STALL_MS = 50.0

# Every measurable gap of the run (the itl view: a read's gap spread over its events; one
# row per read, the first of a request excluded). The baseline and the tail shares are both
# computed from these rows, so the view is evaluated once.
GAPS_SQL = """
SELECT t_ns, itl_ms FROM itl WHERE run_id = $run_id AND itl_ms IS NOT NULL AND NOT coalesced
"""
COALESCED_SQL = """
SELECT count(*) AS coalesced_chunks FROM chunks WHERE run_id = $run_id AND content AND coalesced
"""

# One row per stall event. Gaps are clustered by their end time: an engine-wide pause ends
# for every stream at the same step, while private gaps end whenever their request resumes.
EVENTS_SQL = """
WITH c AS (
  SELECT request_idx, t_ns, coalesced,
         lag(t_ns) OVER (PARTITION BY request_idx ORDER BY seq) AS prev_ns,
         count(*) OVER (PARTITION BY request_idx, read_idx) AS in_read
  FROM chunks WHERE run_id = $run_id AND content
), gaps AS (
  -- A read that delivered n events after a gap g stands for n server gaps of g / n (the itl
  -- view's spread): a busy client that read many events at once is not a stalled server.
  SELECT request_idx, prev_ns AS start_ns, t_ns AS end_ns, (t_ns - prev_ns) / 1e6 AS gap_ms
  FROM c WHERE prev_ns IS NOT NULL AND NOT coalesced AND (t_ns - prev_ns) / in_read > $thr_ns
), breaks AS (
  SELECT *, CASE WHEN end_ns - lag(end_ns) OVER (ORDER BY end_ns, request_idx) > $tol_ns
                 THEN 1 ELSE 0 END AS new_event
  FROM gaps
), clustered AS (
  SELECT *, sum(new_event) OVER (ORDER BY end_ns, request_idx ROWS UNBOUNDED PRECEDING) AS event_id
  FROM breaks
), events AS (
  SELECT event_id, max(start_ns) AS ws, min(end_ns) AS we, min(start_ns) AS first_start,
         max(end_ns) AS last_end, count(*) AS n_stalled, median(gap_ms) AS gap_ms,
         max(gap_ms) AS max_gap_ms, list(request_idx ORDER BY request_idx) AS stalled
  FROM clustered GROUP BY event_id
), spans AS (
  SELECT request_idx, first_content_ns AS f, last_content_ns AS l
  FROM requests WHERE run_id = $run_id AND first_content_ns IS NOT NULL
), pairs AS (
  -- every request streaming across an event: it had a token before and one after
  SELECT e.event_id, s.request_idx, e.ws + (e.we - e.ws) // 10 AS lo, e.we - (e.we - e.ws) // 10 AS hi
  FROM events e JOIN spans s ON s.f <= e.ws AND s.l >= e.we
), content AS (
  SELECT request_idx, t_ns FROM chunks WHERE run_id = $run_id AND content
), next_token AS (
  -- its first token after the event began: inside the event means it kept streaming
  SELECT p.event_id, p.hi, c.t_ns AS next_ns
  FROM pairs p ASOF JOIN content c ON p.request_idx = c.request_idx AND p.lo < c.t_ns
), active AS (
  SELECT event_id, count(*) AS n_active FROM pairs GROUP BY event_id
), progress AS (
  SELECT event_id, count(*) AS n_progressing FROM next_token WHERE next_ns < hi GROUP BY event_id
), steps AS (
  -- engine monotonic seconds are the client's clock on the same host; t0 moves them
  -- onto the run's axis
  SELECT step_id, CAST(round(start_s * 1e9) AS BIGINT) - $t0_ns AS s_ns,
         CAST(round(end_s * 1e9) AS BIGINT) - $t0_ns AS e_ns, prefill_tokens, preemptions
  FROM engine_steps WHERE run_id = $run_id
), in_event AS (
  -- how much of each step falls inside the event: the token that ends a gap reaches the
  -- client a little after its step ended, so the next step (a stall, say) has often just
  -- begun and overlaps the gap by that little; the gap belongs to the step covering most of it
  SELECT e.event_id, s.*, least(s.e_ns, e.last_end) - greatest(s.s_ns, e.first_start) AS inside
  FROM events e JOIN steps s ON s.e_ns > e.first_start AND s.s_ns < e.last_end
), at_steps AS (
  SELECT event_id, arg_max(e_ns - s_ns, inside) / 1e6 AS covering_step_ms,
         arg_max(step_id, inside) AS covering_step_id,
         arg_max(s_ns, inside) AS covering_step_start_ns,
         arg_max(prefill_tokens, inside) AS covering_step_prefill,
         sum(preemptions) AS preemptions
  FROM in_event GROUP BY event_id
)
SELECT e.event_id, e.ws, e.we, e.first_start, e.last_end, e.n_stalled, e.gap_ms, e.max_gap_ms,
       coalesce(a.n_active, 0) AS n_active, coalesce(p.n_progressing, 0) AS n_progressing,
       e.stalled, coalesce(st.covering_step_ms, 'NaN'::DOUBLE) AS covering_step_ms,
       coalesce(st.covering_step_id, -1) AS covering_step_id,
       coalesce(st.covering_step_start_ns, -1) AS covering_step_start_ns,
       coalesce(st.covering_step_prefill, 0) AS covering_step_prefill,
       coalesce(st.preemptions, 0) AS preemptions
FROM events e LEFT JOIN active a USING (event_id) LEFT JOIN progress p USING (event_id)
     LEFT JOIN at_steps st USING (event_id)
ORDER BY e.we
"""

# The run's prefill-carrying steps: what a prefill of a given size costs in this run.
PREFILL_STEPS_SQL = """
SELECT step_id, prefill_tokens, (end_s - start_s) * 1e3 AS step_ms
FROM engine_steps WHERE run_id = $run_id AND prefill_tokens > 0
"""
# Steps whose prefill is within this factor of a long step's are its peers...
_PEER_FACTOR = 2.0
# ...and at least this many are needed to say what its prefill costs.
_MIN_PEERS = 3

CLIENT_LAG_SQL = """
SELECT t_ns, loop_lag_ms FROM client_samples WHERE run_id = $run_id ORDER BY t_ns
"""


@dataclass
class Gaps:
    t_ns: np.ndarray      # when the gap ended (the read that ended it)
    itl_ms: np.ndarray
    sql: str


@dataclass
class Baseline:
    gaps: int
    median_ms: float
    mad_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    coalesced_chunks: int
    threshold_ms: float
    sql: str              # the rows these were computed from (GAPS_SQL, rendered)

    def values(self) -> dict[str, Any]:
        return {k: (round(v, 3) if isinstance(v, float) else v)
                for k, v in self.__dict__.items() if k != "sql"}


@dataclass
class Events:
    """Column arrays, one entry per event (times in ns on the run's axis)."""

    ws: np.ndarray
    we: np.ndarray
    first_start: np.ndarray
    last_end: np.ndarray
    n_stalled: np.ndarray
    gap_ms: np.ndarray
    max_gap_ms: np.ndarray
    n_active: np.ndarray
    n_progressing: np.ndarray
    stalled: list[list[int]]
    kind: np.ndarray            # engine_wide | private | undetermined
    cause: np.ndarray           # see classify()
    covering_step_id: np.ndarray  # the step covering most of the event; -1 when unknown
    covering_step_start_ns: np.ndarray  # on the run's axis; -1 when unknown
    covering_step_ms: np.ndarray
    covering_step_prefill: np.ndarray
    preemptions: np.ndarray
    sql: str

    def __len__(self) -> int:
        return len(self.ws)

    def mask(self, m: np.ndarray) -> np.ndarray:
        return np.flatnonzero(m)


def load_gaps(con: duckdb.DuckDBPyConnection, run_id: str) -> Gaps:
    sql, cols = fetch_numpy(con, GAPS_SQL, run_id=run_id)
    return Gaps(np.asarray(cols["t_ns"], dtype=np.int64), np.asarray(cols["itl_ms"], dtype=float), sql)


def baseline(con: duckdb.DuckDBPyConnection, run_id: str, gaps: Gaps,
             min_stall_ms: float = DEFAULT_MIN_STALL_MS) -> Baseline | None:
    """Median, MAD (unscaled, as DuckDB's mad()), quantiles (linear, as quantile_cont) of
    the run's gaps, and the stall threshold from them; None when there are no gaps."""
    x = gaps.itl_ms
    if not len(x):
        return None
    med = float(np.median(x))
    mad = float(np.median(np.abs(x - med)))
    p90, p99 = (float(v) for v in np.quantile(x, [0.90, 0.99]))
    _, row = fetch_one(con, COALESCED_SQL, run_id=run_id)
    thr = max(_MIN_RATIO * med, med + _SIGMAS * _MAD_SIGMA * mad, min_stall_ms)
    return Baseline(len(x), med, mad, p90, p99, float(x.max()), int(row[0]), float(thr), gaps.sql)


def find_events(con: duckdb.DuckDBPyConnection, run_id: str, t0_ns: int, base: Baseline,
                has_steps: bool, has_client_samples: bool) -> Events:
    # Resume times of one engine-wide pause spread only by the client's read order; half
    # the threshold keeps every clustered pair of gaps overlapping.
    tol_ns = int(max(base.median_ms, 1.0) * 1e6)
    tol_ns = min(tol_ns, int(base.threshold_ms * 1e6 / 2))
    sql, cols = fetch_numpy(con, EVENTS_SQL, run_id=run_id, thr_ns=int(base.threshold_ms * 1e6),
                            tol_ns=tol_ns, t0_ns=t0_ns)
    n = len(cols["event_id"])
    ev = Events(
        ws=np.asarray(cols["ws"], dtype=np.int64), we=np.asarray(cols["we"], dtype=np.int64),
        first_start=np.asarray(cols["first_start"], dtype=np.int64),
        last_end=np.asarray(cols["last_end"], dtype=np.int64),
        n_stalled=np.asarray(cols["n_stalled"], dtype=np.int64),
        gap_ms=np.asarray(cols["gap_ms"], dtype=float),
        max_gap_ms=np.asarray(cols["max_gap_ms"], dtype=float),
        n_active=np.asarray(cols["n_active"], dtype=np.int64),
        n_progressing=np.asarray(cols["n_progressing"], dtype=np.int64),
        stalled=[list(map(int, s)) for s in cols["stalled"]],
        kind=np.empty(n, dtype=object), cause=np.empty(n, dtype=object),
        covering_step_id=np.asarray(cols["covering_step_id"], dtype=np.int64),
        covering_step_start_ns=np.asarray(cols["covering_step_start_ns"], dtype=np.int64),
        covering_step_ms=np.asarray(cols["covering_step_ms"], dtype=float),
        covering_step_prefill=np.asarray(cols["covering_step_prefill"], dtype=np.int64),
        preemptions=np.asarray(cols["preemptions"], dtype=np.int64), sql=sql)
    lag = _client_lag_at(con, run_id, ev.we) if has_client_samples and n else np.zeros(n)
    beyond = _beyond_prefill_ms(con, run_id, ev) if has_steps and n else None
    classify(ev, has_steps, lag, beyond, base.threshold_ms)
    return ev


def _beyond_prefill_ms(con: duckdb.DuckDBPyConnection, run_id: str, ev: Events) -> np.ndarray:
    """Per event: how much longer its covering step took than the run's other steps carrying
    a prefill of about its size (median of those within a factor 2 of its prefill tokens);
    NaN where the step has no prefill or fewer than 3 such peers."""
    _, cols = fetch_numpy(con, PREFILL_STEPS_SQL, run_id=run_id)
    ids = np.asarray(cols["step_id"], dtype=np.int64)
    tokens = np.asarray(cols["prefill_tokens"], dtype=float)
    ms = np.asarray(cols["step_ms"], dtype=float)
    out = np.full(len(ev), np.nan)
    for i in range(len(ev)):
        p = float(ev.covering_step_prefill[i])
        if p <= 0:
            continue
        peers = ((tokens >= p / _PEER_FACTOR) & (tokens <= p * _PEER_FACTOR)
                 & (ids != ev.covering_step_id[i]))
        if int(peers.sum()) >= _MIN_PEERS:
            out[i] = float(ev.covering_step_ms[i]) - float(np.median(ms[peers]))
    return out


def classify(ev: Events, has_steps: bool, client_lag_ms: np.ndarray,
             beyond_prefill_ms: np.ndarray | None = None, threshold_ms: float = np.inf) -> None:
    """Set `kind` (the cross-request test) and `cause` (what the engine data says) per event.

    Causes: `engine_pause` (a long engine step without prefill, or one that took a stall's
    worth, `threshold_ms`, longer than the run's steps with a prefill of about its size:
    `beyond_prefill_ms`), `prefill` (a long step its prefill tokens explain), `preemption`
    (the engine preempted during the gap),
    `client_pause` (the engine kept stepping, or the client's event loop was stalled: the gap
    is the observer's own), `unattributed` (no step log to say).
    """
    progressing = ev.n_progressing > 0
    ev.kind[:] = "undetermined"
    ev.kind[(ev.n_active >= 2) & ~progressing] = "engine_wide"
    ev.kind[progressing] = "private"
    # A long step explains a pause every stream shared; a private gap's others were served
    # by the steps during it, so no step stopped it alone: with a step log, preemption or
    # the reader. (Else one stream read late across a long prefill step is called a private
    # stall, and counted as a prefill event too.)
    long_step = (ev.covering_step_ms >= 0.5 * ev.gap_ms) & ~progressing  # NaN compares False
    for i in range(len(ev)):
        if has_steps and ev.kind[i] == "private" and ev.preemptions[i] > 0:
            ev.cause[i] = "preemption"
        elif has_steps and long_step[i]:
            # A host pause inside a step that also prefilled is still a pause: with chunked
            # prefill most steps under load carry some prefill tokens.
            paused = (beyond_prefill_ms is not None
                      and beyond_prefill_ms[i] >= threshold_ms)  # NaN compares False
            ev.cause[i] = ("prefill" if ev.covering_step_prefill[i] > 0 and not paused
                           else "engine_pause")
        elif has_steps and ev.preemptions[i] > 0:
            ev.cause[i] = "preemption"
        elif has_steps or client_lag_ms[i] >= 0.5 * ev.gap_ms[i]:
            # The engine kept stepping (or the client's own loop was stalled): the gap is
            # the observer's, not the engine's.
            ev.cause[i] = "client_pause"
        else:
            ev.cause[i] = "unattributed"


def _client_lag_at(con: duckdb.DuckDBPyConnection, run_id: str, times_ns: np.ndarray) -> np.ndarray:
    _, cols = fetch_numpy(con, CLIENT_LAG_SQL, run_id=run_id)
    t = np.asarray(cols["t_ns"], dtype=np.int64)
    lag = np.nan_to_num(np.asarray(cols["loop_lag_ms"], dtype=float))
    if len(t) == 0:
        return np.zeros(len(times_ns))
    # Each sample holds the worst lag of the interval that ends at its t_ns.
    idx = np.clip(np.searchsorted(t, times_ns, side="left"), 0, len(t) - 1)
    return lag[idx]
