"""What the matched-load comparison reads from a fleet run: per request its replica, load and
latencies, and per engine step its replica, work and duration.

A request's load is the number of requests in flight on its replica: at send for TTFT
(`requests.replica_concurrency`: the queue and batch it met), and averaged over its decode for
TPOT (from every request's send and end on that replica), since the batch a token is decoded
in changes while the request streams; a request sent into a quiet moment of a busy replica
sees the busy batches that follow.
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb
import numpy as np

from playbooks.sql import fetch, fetch_numpy

REQUESTS_SQL = """
WITH q AS (
  SELECT r.request_idx, r.replica, r.replica_concurrency, r.send_ns, r.first_content_ns,
         coalesce(r.last_choices_ns, r.last_content_ns) AS last_ns,
         l.ttft_ms, l.tpot_ms, l.e2e_ms
  FROM requests r JOIN request_latency l USING (run_id, request_idx)
  WHERE r.run_id = $run_id AND r.phase = 'measure' AND r.error_class IS NULL
    AND r.replica IS NOT NULL
), busy AS (  -- every request of the run holds a slot on its replica from send to end
  SELECT replica, send_ns AS s, coalesce(end_ns, last_chunk_ns, send_ns) AS e
  FROM requests WHERE run_id = $run_id AND replica IS NOT NULL AND send_ns IS NOT NULL
), ev AS (    -- in flight changes by d at t
  SELECT replica, t, sum(d) AS d
  FROM (SELECT replica, s AS t, 1 AS d FROM busy UNION ALL SELECT replica, e, -1 FROM busy)
  GROUP BY replica, t
), run AS (   -- n in flight from t to the next change
  SELECT replica, t, sum(d) OVER (PARTITION BY replica ORDER BY t)::DOUBLE AS n,
         lead(t) OVER (PARTITION BY replica ORDER BY t) AS t_next
  FROM ev
), cum AS (   -- f: the in-flight count integrated from the first change up to t
  SELECT replica, t, n,
         coalesce(sum(n * (t_next - t)) OVER (PARTITION BY replica ORDER BY t
                  ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS f
  FROM run
), fa AS (
  SELECT q.request_idx, c.f + c.n * (q.first_content_ns - c.t) AS f
  FROM q ASOF JOIN cum c ON q.replica = c.replica AND q.first_content_ns >= c.t
), fb AS (
  SELECT q.request_idx, c.f + c.n * (q.last_ns - c.t) AS f
  FROM q ASOF JOIN cum c ON q.replica = c.replica AND q.last_ns >= c.t
)
SELECT q.request_idx, q.replica, q.replica_concurrency, q.send_ns, q.ttft_ms, q.tpot_ms, q.e2e_ms,
       CASE WHEN q.last_ns > q.first_content_ns
            THEN (fb.f - fa.f) / (q.last_ns - q.first_content_ns) END AS decode_load
FROM q LEFT JOIN fa USING (request_idx) LEFT JOIN fb USING (request_idx)
ORDER BY q.request_idx
"""

STEPS_SQL = """
SELECT replica, step_id, (end_s - start_s) * 1e3 AS step_ms, decode_seqs, prefill_tokens,
       start_s
FROM engine_steps
WHERE run_id = $run_id AND replica IS NOT NULL AND end_s > start_s
  AND decode_seqs + prefill_tokens > 0
ORDER BY replica, step_id
"""

# Requests routed to each replica, whatever became of them: the load the router gave it.
SENT_SQL = """
SELECT replica, count(*) AS sent FROM requests
WHERE run_id = $run_id AND replica IS NOT NULL GROUP BY replica ORDER BY replica
"""


# What each replica's engine itself spent on a request before its first token, per request
# sent: the time it waited in the engine's queue (Little's law: the step log's waiting count
# integrated over the steps' time) and the time of the steps that carried prefill. NULL wait
# where a step has no waiting count. steps_missing: step ids absent between the first and last
# the run stored (the engine's ring buffer overflowed between polls); such a log undercounts
# both parts, so it cannot say the engine spent no more than its peers.
ENGINE_TIME_SQL = """
WITH sent AS (
  SELECT replica, count(*) AS n FROM requests
  WHERE run_id = $run_id AND replica IS NOT NULL GROUP BY replica
),
logged AS (
  SELECT replica, max(step_id) - min(step_id) + 1 - count(DISTINCT step_id) AS steps_missing
  FROM engine_steps WHERE run_id = $run_id GROUP BY replica
)
SELECT s.replica,
       CASE WHEN count(*) = count(s.num_waiting)
            THEN sum(s.num_waiting * (s.end_s - s.start_s)) * 1e3 / any_value(sent.n) END
         AS queue_wait_ms,
       coalesce(sum(s.end_s - s.start_s) FILTER (WHERE s.prefill_tokens > 0), 0) * 1e3
         / any_value(sent.n) AS prefill_ms,
       any_value(logged.steps_missing) AS steps_missing
FROM engine_steps s JOIN sent USING (replica) JOIN logged USING (replica)
WHERE s.run_id = $run_id AND s.end_s > s.start_s
GROUP BY s.replica ORDER BY s.replica
"""


# The same two parts from vLLM's own per-request histograms, for a fleet without a step log
# (vLLM serves none): what this run added to each replica's queue-time and prefill-time sums,
# over what it added to their counts. vLLM observes both when a request finishes: the queue
# time from arrival in the engine to its first scheduling, the prefill time from then to its
# first token; the API server's own work (HTTP, tokenizer, detokenizer) is in neither. A
# scrape where the process started anew, or where a count fell, follows a restart: every
# series counts from zero there, so its value is what it added (a sum need not fall: the old
# one may have been smaller than what the new engine has counted since).
ENGINE_TIME_METRICS_SQL = """
WITH s AS (
  SELECT replica, t_ns, name, value,
         lag(value) OVER (PARTITION BY replica, name, labels ORDER BY t_ns) AS prev
  FROM metric_samples
  WHERE run_id = $run_id AND source = 'metrics' AND replica IS NOT NULL
    AND name IN ('vllm:request_queue_time_seconds_sum', 'vllm:request_queue_time_seconds_count',
                 'vllm:request_prefill_time_seconds_sum', 'vllm:request_prefill_time_seconds_count',
                 'process_start_time_seconds')
), restarts AS (
  SELECT DISTINCT replica, t_ns FROM s
  WHERE (name = 'process_start_time_seconds' AND value <> prev)
     OR (ends_with(name, '_count') AND value < prev)
), added AS (
  SELECT s.replica, s.name,
         sum(CASE WHEN r.t_ns IS NULL THEN s.value - s.prev ELSE s.value END) AS d
  FROM s LEFT JOIN restarts r ON r.replica = s.replica AND r.t_ns = s.t_ns
  WHERE s.prev IS NOT NULL AND s.name <> 'process_start_time_seconds'
  GROUP BY s.replica, s.name
), m AS (
  SELECT replica,
         max(d) FILTER (WHERE name = 'vllm:request_queue_time_seconds_sum') AS queue_s,
         max(d) FILTER (WHERE name = 'vllm:request_queue_time_seconds_count') AS queued,
         max(d) FILTER (WHERE name = 'vllm:request_prefill_time_seconds_sum') AS prefill_s,
         max(d) FILTER (WHERE name = 'vllm:request_prefill_time_seconds_count') AS prefilled
  FROM added GROUP BY replica
)
SELECT replica, 1e3 * queue_s / queued AS queue_wait_ms, 1e3 * prefill_s / prefilled AS prefill_ms,
       least(queued, prefilled) AS requests
FROM m WHERE queued > 0 AND prefilled > 0 ORDER BY replica
"""


@dataclass(frozen=True)
class EngineTime:
    """Milliseconds a replica's engine spent per request before first tokens."""

    queue_wait_ms: float | None   # waiting in its queue (None: the log has no waiting count)
    prefill_ms: float             # in steps that carried prefill (vllm: scheduled to first token)
    steps_missing: int = 0        # step ids absent from the stored log (then no total)
    source: str = "steps"         # "steps": its step log, per request sent; "vllm": its histograms

    @property
    def total_ms(self) -> float | None:
        if self.queue_wait_ms is None or self.steps_missing:
            return None
        return self.queue_wait_ms + self.prefill_ms


@dataclass
class Observations:
    replicas: list[str]          # in the run's order
    requests: dict[str, np.ndarray]
    steps: dict[str, np.ndarray]
    requests_sql: str
    steps_sql: str
    sent: dict[str, int] | None = None   # requests routed per replica (None: count the successes)
    sent_sql: str | None = None
    engine_time: dict[str, EngineTime] | None = None  # None: no step log or histograms to say
    engine_time_sql: str | None = None

    @property
    def n_requests(self) -> int:
        return len(self.requests["request_idx"])


def load_observations(con: duckdb.DuckDBPyConnection, run_id: str, order: list[str]) -> Observations:
    rsql, req = fetch_numpy(con, REQUESTS_SQL, run_id=run_id)
    ssql, steps = fetch_numpy(con, STEPS_SQL, run_id=run_id)
    seen = {str(r) for r in req["replica"]} | {str(r) for r in steps["replica"]}
    names = [n for n in order if n in seen] + sorted(seen - set(order))
    for d in (req, steps):
        for k, v in d.items():  # NULLs come back masked: numbers as NaN
            if isinstance(v, np.ma.MaskedArray):
                d[k] = (np.ma.filled(v.astype(np.float64), np.nan) if v.dtype.kind in "iuf"
                        else v.filled(None))
    tsql, sent = fetch(con, SENT_SQL, run_id=run_id)
    esql, engine = fetch(con, ENGINE_TIME_SQL, run_id=run_id)
    times = {str(r): EngineTime(None if w is None else float(w), float(p), int(m or 0))
             for r, w, p, m in engine}
    if not times:
        # One source for the whole fleet: a replica's step log and another's histograms do
        # not measure the same thing (per request sent, per request finished).
        esql, engine = fetch(con, ENGINE_TIME_METRICS_SQL, run_id=run_id)
        times = {str(r): EngineTime(float(w), float(p), source="vllm") for r, w, p, _ in engine}
    return Observations(names, req, steps, rsql, ssql, {str(r): int(n) for r, n in sent}, tsql,
                        times or None, esql)
