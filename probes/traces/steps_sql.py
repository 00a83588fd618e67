"""CPU-bound steps: how long the GPU sat idle inside each annotated step's work.

A step is an annotation (Kineto `ProfilerStep#N` or `record_function` range, an NVTX range)
or CPU op whose name matches the step pattern. Its GPU work is the set of GPU ops whose launch
call started inside the step; their span runs from the first one's start to the last one's
end. When the host launches faster than the GPU runs, the ops queue and run back to back and
the span is busy; when the host is the bottleneck (Python, scheduling, launch overhead), the
GPU waits between ops and the idle share of the span grows. HTA has no such analysis; the
gaps and merging are its definitions (`timeline_sql`).
"""

from __future__ import annotations

from probes.traces.timeline_sql import merged

STEPS = """
WITH o AS (SELECT (min(start_ns) // 1000) * 1000 AS o FROM trace_gpu_ops WHERE trace_id = $trace_id),
st AS (
  SELECT x.rank, x.name, (x.start_ns - o.o) / 1000.0 AS step_s, (x.end_ns - o.o) / 1000.0 AS step_e
  FROM (SELECT rank, name, start_ns, end_ns FROM trace_annotations
        WHERE trace_id = $trace_id AND end_ns IS NOT NULL AND kind <> 'gpu_user_annotation'
        UNION ALL
        SELECT rank, name, start_ns, end_ns FROM trace_cpu_ops WHERE trace_id = $trace_id) x, o
  WHERE regexp_matches(x.name, $pattern)
), k AS (
  SELECT st.rank, st.name, st.step_s, st.step_e, t.ts, t.e, t.event_id
  FROM st JOIN {tl} t ON t.rank = st.rank AND t.launch_ts >= st.step_s AND t.launch_ts < st.step_e
), m AS MERGED, g AS (
  SELECT rank, name, step_s, ts - lag(e) OVER (PARTITION BY rank, name, step_s ORDER BY ts) AS gap,
         e - ts AS busy, ts, e
  FROM m
), per AS (
  SELECT rank, name, step_s, min(ts) AS gpu_s, max(e) AS gpu_e, sum(busy) AS busy,
         coalesce(max(gap), 0) AS largest_gap
  FROM g GROUP BY ALL
), n AS (SELECT rank, name, step_s, count(*) AS ops FROM k GROUP BY ALL)
SELECT st.rank, st.name AS step, st.step_s AS step_start_us, st.step_e - st.step_s AS cpu_us,
       coalesce(n.ops, 0) AS gpu_ops, per.gpu_e - per.gpu_s AS gpu_span_us, per.busy AS gpu_busy_us,
       per.gpu_e - per.gpu_s - per.busy AS gpu_idle_us,
       (per.gpu_e - per.gpu_s - per.busy) / nullif(per.gpu_e - per.gpu_s, 0) AS idle_share,
       per.largest_gap AS largest_gap_us,
       (per.gpu_e - per.gpu_s - per.busy) / nullif(per.gpu_e - per.gpu_s, 0) >= $share AS cpu_bound
FROM st LEFT JOIN per USING (rank, name, step_s) LEFT JOIN n USING (rank, name, step_s)
ORDER BY st.rank, st.step_s
""".replace("MERGED", merged("k", "rank, name, step_s"))

# A CPU-only profile (the torch executor on a CPU): the steps' work is the CPU ops on the
# step annotation's thread; busy is their union, the rest of the step is the engine's own
# Python (scheduling, sampling, bookkeeping) between ops.
CPU_STEPS = """
WITH st AS (
  SELECT rank, tid, name, start_ns, end_ns FROM trace_annotations
  WHERE trace_id = $trace_id AND end_ns IS NOT NULL AND regexp_matches(name, $pattern)
), k AS (
  SELECT st.rank, st.name, st.start_ns AS step_s, st.end_ns AS step_e, c.event_id,
         c.start_ns / 1000.0 AS ts, least(c.end_ns, st.end_ns) / 1000.0 AS e
  FROM st JOIN trace_cpu_ops c ON c.trace_id = $trace_id AND c.rank = st.rank
       AND c.tid = st.tid AND c.start_ns >= st.start_ns AND c.start_ns < st.end_ns
), m AS MERGED
SELECT st.rank, st.name AS step, (st.end_ns - st.start_ns) / 1000.0 AS step_us,
       (SELECT count(*) FROM k WHERE k.rank = st.rank AND k.step_s = st.start_ns) AS cpu_ops,
       coalesce((SELECT sum(e - ts) FROM m WHERE m.rank = st.rank AND m.step_s = st.start_ns), 0)
         AS ops_busy_us,
       coalesce((SELECT sum(e - ts) FROM m WHERE m.rank = st.rank AND m.step_s = st.start_ns), 0)
         / nullif((st.end_ns - st.start_ns) / 1000.0, 0) AS busy_share
FROM st ORDER BY st.rank, st.start_ns
""".replace("MERGED", merged("k", "rank, step_s"))
