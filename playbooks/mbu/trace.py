"""Where decode step time went, measured in a profiler trace linked to the run.

Reads the store's trace tables (`infbench trace import PATH --run RUN`), never the importer's
code. A step in the trace is an annotation named like the engine's step (`engine_step#N`,
`step#N`, `ProfilerStep#N`) whose number is the step log's `step_id`, so each traced step gets
the bytes the MBU arithmetic computed for it. The step's GPU work is the GPU ops launched
inside the annotation. Per decode step, in shares of the traced steps' time:

- `kernel_efficiency` = (GPU busy time - bytes / datasheet bandwidth) / step time: kernels
  moving the bytes slower than the datasheet rate (busy = union of the ops' intervals);
- `gaps_between_kernels` = (GPU span - busy) / step time: the GPU idle between the first and
  the last op of the step (launch latency, small host work between kernels);
- `host_launch_overhead` = (step time - GPU span) / step time: the step's time before its
  first op starts and after its last one ends (scheduling, sampling, synchronisation);
- `padding` = the padded rows' share of the bytes, at the kernels' achieved rate, taken out
  of `kernel_efficiency`.
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb
import numpy as np

from playbooks.sql import fetch, fetch_numpy

STEP_PATTERN = r"(?i)^(engine_step|step|ProfilerStep)\s*#\s*(\d+)$"

LINKED_SQL = """
SELECT t.trace_id, t.source, t.path, count(g.event_id) AS gpu_ops
FROM traces t LEFT JOIN trace_gpu_ops g USING (trace_id)
WHERE t.run_id = $run_id GROUP BY ALL ORDER BY max(t.imported_at) DESC
"""

TRACE_STEPS_SQL = """
WITH st AS (
  SELECT rank, CAST(regexp_extract(name, $pattern, 2) AS BIGINT) AS step_id, start_ns, end_ns
  FROM trace_annotations
  WHERE trace_id = $trace_id AND end_ns IS NOT NULL AND regexp_matches(name, $pattern)
), ops AS (
  SELECT st.rank, st.step_id, g.event_id, g.start_ns, g.end_ns
  FROM st JOIN trace_api_calls a ON a.trace_id = $trace_id AND a.rank = st.rank
       AND a.start_ns >= st.start_ns AND a.start_ns < st.end_ns
  JOIN trace_gpu_ops g ON g.trace_id = $trace_id AND g.rank = a.rank AND g.correlation = a.correlation
), grp AS (
  SELECT *, sum(CASE WHEN start_ns > prev_end THEN 1 ELSE 0 END)
              OVER (PARTITION BY rank, step_id ORDER BY start_ns, end_ns, event_id) AS g
  FROM (SELECT *, max(end_ns) OVER (PARTITION BY rank, step_id ORDER BY start_ns, end_ns, event_id
                                    ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
        FROM ops)
), merged AS (
  SELECT rank, step_id, min(start_ns) AS s, max(end_ns) AS e FROM grp GROUP BY rank, step_id, g
), busy AS (
  SELECT rank, step_id, sum(e - s) AS busy_ns, min(s) AS first_ns, max(e) AS last_ns,
         count(*) AS busy_intervals
  FROM merged GROUP BY ALL
)
SELECT st.step_id, st.end_ns - st.start_ns AS step_ns, coalesce(b.busy_ns, 0) AS busy_ns,
       coalesce(b.last_ns - b.first_ns, 0) AS span_ns,
       (SELECT count(*) FROM ops WHERE ops.rank = st.rank AND ops.step_id = st.step_id) AS ops
FROM st LEFT JOIN busy b USING (rank, step_id)
WHERE st.rank = (SELECT min(rank) FROM st)
ORDER BY st.step_id
"""


@dataclass
class TraceBuckets:
    trace_id: str
    sql: str
    steps: int                  # traced decode steps matched to the step log
    step_time_s: float
    busy_s: float
    span_s: float
    ideal_s: float
    kernel_bandwidth: float     # bytes / GPU busy time (B/s)
    buckets: dict[str, float]   # shares of the traced steps' time


def linked_traces(con: duckdb.DuckDBPyConnection, run_id: str) -> tuple[str, list[tuple]]:
    return fetch(con, LINKED_SQL, run_id=run_id)


def trace_buckets(con: duckdb.DuckDBPyConnection, trace_id: str, step_ids: np.ndarray,
                  step_bytes: np.ndarray, pad_bytes: np.ndarray, peak: float) -> TraceBuckets | None:
    """Buckets over the decode steps that appear in both the trace and the step log; None
    when none do (a trace of other steps, or with no GPU ops)."""
    sql, c = fetch_numpy(con, TRACE_STEPS_SQL, trace_id=trace_id, pattern=STEP_PATTERN)
    if len(c["step_id"]) == 0:
        return None
    by_id = {int(s): i for i, s in enumerate(step_ids)}
    idx = np.array([by_id.get(int(s), -1) for s in c["step_id"]])
    keep = (idx >= 0) & (np.asarray(c["ops"]) > 0)
    if not keep.any():
        return None
    take = idx[keep]
    step = np.asarray(c["step_ns"], dtype=float)[keep] / 1e9
    busy = np.asarray(c["busy_ns"], dtype=float)[keep] / 1e9
    span = np.asarray(c["span_ns"], dtype=float)[keep] / 1e9
    total_b, pad_b = float(step_bytes[take].sum()), float(pad_bytes[take].sum())
    total_t, total_busy, total_span = float(step.sum()), float(busy.sum()), float(span.sum())
    ideal = total_b / peak
    kernel_bw = (total_b + pad_b) / total_busy if total_busy > 0 else float("nan")
    padding = pad_b / kernel_bw if total_busy > 0 else 0.0
    buckets = {
        "kernel_efficiency": max(0.0, total_busy - ideal - padding) / total_t,
        "gaps_between_kernels": max(0.0, total_span - total_busy) / total_t,
        "host_launch_overhead": max(0.0, total_t - total_span) / total_t,
        "padding": padding / total_t,
    }
    return TraceBuckets(trace_id, sql, int(keep.sum()), total_t, total_busy, total_span, ideal,
                        kernel_bw, buckets)
