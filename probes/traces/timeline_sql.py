"""The SQL of the timeline analyses, with Holistic Trace Analysis's definitions.

HTA (facebookresearch/HolisticTraceAnalysis, 0.5.0) defines the breakdowns users check
numbers against, so these queries copy its definitions, including the parts that look
accidental, because a number that differs from HTA's is a number nobody can check:

- Which GPU events count. With two or more distinct `ProfilerStep` names in the trace, the
  last profiler step is cut off: only CPU events that start before the last step starts are
  kept, and a GPU event is kept when a kept CPU event (its launch) shares its correlation.
  Without two steps every event counts. Events on a GPU stream count in the temporal and
  kernel-type breakdowns whatever they are (memcpy, memset, `cuda_sync` too).
- Rounding. When a Kineto file has sub-microsecond timestamps HTA rounds each event inward
  to whole microseconds (start up, end down; pytorch#122425); so does `EVENTS` below, and,
  like HTA, it rounds the doubles HTA parses (`ts`, and `ts + dur` for the end), not the
  exact literals: an epoch-microsecond ts is a double only to a quarter microsecond
  (`HTA_TS`; timeline_arrays.hta_doubles says why it is the literal's nearest double).
- Kernel types (`hta/utils/utils.py` get_kernel_type): COMMUNICATION matches `^nccl.*Kernel`;
  MEMORY starts with Memcpy, Memset or dma; COMPUTATION is anything that matches none of
  `^nccl.*Kernel`, `.*Memcpy`, `^Memset`, `.*Sync` (so 0.5.0 counts `Stream Wait Event` as
  computation); the rest (`Stream Sync`, `Context Sync`) is OTHER.
- Merging (`merge_kernel_intervals`): sorted by start, an interval opens a new group only
  when it starts after every earlier interval has ended; a group is [min start, max end].
- Idle time per stream: the gap before each kernel (its start minus the previous kernel's
  end on that stream) is `host_wait` when the kernel's launch call started after the previous
  kernel ended, else `kernel_wait` when shorter than `consecutive_kernel_delay` (30, in the
  trace's microseconds), else `other`; the first kernel's gap is empty and counts as `other`.

Times below are microseconds (DOUBLE) from `origin_ns`, a whole microsecond at or before the
trace's first event, so rounding relative to it equals rounding the raw timestamps.
"""

from __future__ import annotations

# What `Timeline.query` answers, by name; here, in a module that imports nothing, so the CLI
# can list them without loading DuckDB.
ANALYSES = ("temporal", "idle", "idle_stats", "kernel_types", "kernels", "overlap",
            "launch_summary", "steps", "cpu_steps")

# The double HTA parses from the `ts` literal of an event starting at {ns}, in us; the end
# is that plus dur in us (also a double), as HTA adds them before rounding.
HTA_TS = "(({ns}) // 1000)::DOUBLE + (({ns}) % 1000)::DOUBLE / 1000"


def _inward(start: str, end: str, flag: str) -> tuple[str, str]:
    """SQL of (start, end) in us from origin o.o: rounded inward from HTA's doubles when
    `flag`, exact otherwise."""
    ts = HTA_TS.format(ns=start)
    return (f"CASE WHEN {flag} THEN ceil({ts}) - o.o // 1000 "
            f"ELSE ({start} - o.o) / 1000.0 END",
            f"CASE WHEN {flag} THEN floor({ts} + ({end} - {start})::DOUBLE / 1000) - o.o // 1000 "
            f"ELSE ({end} - o.o) / 1000.0 END")


_G_TS, _G_E = _inward("g.start_ns", "g.end_ns", "r.round_to_us")
_A_TS, _A_E = _inward("a.start_ns", "a.end_ns", "r.round_to_us")

# Kernel type of a GPU event name, as HTA 0.5.0 decides it.
KERNEL_TYPE = """CASE
  WHEN regexp_matches(name, '^nccl.*Kernel') THEN 'COMMUNICATION'
  WHEN regexp_matches(name, '^(Memcpy|Memset|dma)') THEN 'MEMORY'
  WHEN NOT regexp_matches(name, '^(nccl.*Kernel|.*Memcpy|Memset|.*Sync)') THEN 'COMPUTATION'
  ELSE 'OTHER' END"""

# The analysed GPU events of one trace: {tl} is the temp table's name, $trace_id the trace.
EVENTS = """
CREATE OR REPLACE TEMP TABLE {tl} AS
WITH ranks AS (
  SELECT rank, round_to_us FROM trace_ranks WHERE trace_id = $trace_id
), origin AS (
  SELECT (min(start_ns) // 1000) * 1000 AS o FROM trace_gpu_ops WHERE trace_id = $trace_id
), steps AS (
  SELECT rank, start_ns, name FROM trace_cpu_ops
  WHERE trace_id = $trace_id AND name LIKE '%ProfilerStep%'
  UNION ALL
  SELECT rank, start_ns, name FROM trace_annotations
  WHERE trace_id = $trace_id AND name LIKE '%ProfilerStep%' AND end_ns IS NOT NULL
), cut AS (
  -- HTA cuts the last profiler step only when the trace names two or more
  SELECT rank, max(start_ns) AS last_step_ns FROM steps
  WHERE (SELECT count(DISTINCT name) FROM steps) >= 2 GROUP BY rank
), us AS (
  SELECT g.*, r.round_to_us, {g_ts} AS ts, {g_e} AS e
  FROM trace_gpu_ops g JOIN ranks r USING (rank), origin o
  WHERE g.trace_id = $trace_id AND g.stream IS NOT NULL AND g.stream <> -1
), launch AS (
  -- the launching call of each correlation; Nsight nests two (cudaLaunchKernel and its
  -- _v7000 body): the outer one, which starts first, is the launch
  SELECT a.rank, a.correlation,
         min({a_ts}) AS launch_ts, arg_min({a_e}, a.start_ns) AS launch_e,
         bool_or(c.last_step_ns IS NULL OR
                 CASE WHEN r.round_to_us THEN ceil({a_hta}) < ceil({cut_hta})
                      ELSE a.start_ns < c.last_step_ns END) AS before_cut,
         any_value(c.last_step_ns IS NOT NULL) AS cutting
  FROM trace_api_calls a JOIN ranks r USING (rank) LEFT JOIN cut c USING (rank), origin o
  WHERE a.trace_id = $trace_id AND a.correlation IS NOT NULL AND a.correlation <> -1
  GROUP BY a.rank, a.correlation
)
SELECT us.rank, us.event_id, us.name, us.kind, us.stream, us.ts, us.e, us.e - us.ts AS dur,
       us.correlation, l.launch_ts, l.launch_e, {kernel_type} AS ktype
FROM us LEFT JOIN launch l ON l.rank = us.rank AND l.correlation = us.correlation
LEFT JOIN cut c ON c.rank = us.rank
WHERE NOT EXISTS (SELECT 1 FROM cut)
   OR (coalesce(us.correlation, -1) >= 0 AND l.before_cut AND c.rank IS NOT NULL)
   OR (coalesce(us.correlation, -1) < 0 AND us.start_ns < c.last_step_ns)
""".replace("{kernel_type}", KERNEL_TYPE.replace("name", "us.name")).replace(
    "{g_ts}", _G_TS).replace("{g_e}", _G_E).replace("{a_ts}", _A_TS).replace(
    "{a_e}", _A_E).replace("{a_hta}", HTA_TS.format(ns="a.start_ns")).replace(
    "{cut_hta}", HTA_TS.format(ns="c.last_step_ns"))


def merged(src: str, part: str) -> str:
    """HTA's merge_kernel_intervals over `src` (columns ts, e, event_id), per `part`."""
    return f"""(
  SELECT {part}, min(ts) AS ts, max(e) AS e FROM (
    SELECT *, sum(CASE WHEN ts > prev_max THEN 1 ELSE 0 END)
                OVER (PARTITION BY {part} ORDER BY ts, e, event_id ROWS UNBOUNDED PRECEDING) AS grp
    FROM (SELECT *, max(e) OVER (PARTITION BY {part} ORDER BY ts, e, event_id
                                 ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_max
          FROM {src}))
  GROUP BY {part}, grp)"""


TEMPORAL = """
WITH m AS {merged_all}, c AS {merged_comp},
t AS (
  SELECT rank, arg_max(e, ts) - min(ts) AS kernel_time, sum(e - ts) AS busy FROM m GROUP BY rank
)
SELECT t.rank,
       t.kernel_time - t.busy AS idle_time_us,
       coalesce(cc.compute, 0) AS compute_time_us,
       t.kernel_time - coalesce(cc.compute, 0) - (t.kernel_time - t.busy) AS non_compute_time_us,
       t.kernel_time AS kernel_time_us,
       round(100 * (t.kernel_time - t.busy) / t.kernel_time, 2) AS idle_time_pctg,
       round(100 * coalesce(cc.compute, 0) / t.kernel_time, 2) AS compute_time_pctg,
       round(100 * (t.busy - coalesce(cc.compute, 0)) / t.kernel_time, 2) AS non_compute_time_pctg
FROM t LEFT JOIN (SELECT rank, sum(e - ts) AS compute FROM c GROUP BY rank) cc USING (rank)
ORDER BY t.rank
"""

IDLE_GAPS = """
WITH k AS (
  SELECT rank, stream, event_id, ts, e, launch_ts,
         lag(e) OVER (PARTITION BY rank, stream ORDER BY ts, event_id) AS prev_end
  FROM {tl} WHERE kind IN ('kernel', 'memcpy', 'memset')
)
SELECT rank, stream, event_id, ts - prev_end AS idle_interval,
       CASE WHEN launch_ts > prev_end THEN 'host_wait'
            WHEN ts - prev_end < $delay THEN 'kernel_wait' ELSE 'other' END AS idle_category
FROM k
"""

IDLE = """
WITH g AS ({gaps}), s AS (
  SELECT rank, stream, idle_category, coalesce(sum(idle_interval), 0) AS idle_time
  FROM g GROUP BY ALL
)
SELECT rank, stream, idle_category, idle_time,
       idle_time / sum(idle_time) OVER (PARTITION BY rank, stream) AS idle_time_ratio
FROM s ORDER BY rank, stream, idle_category
"""

IDLE_STATS = """
WITH g AS ({gaps})
SELECT rank, stream, idle_category, count(idle_interval) AS count, avg(idle_interval) AS mean,
       stddev_samp(idle_interval) AS std, min(idle_interval) AS min,
       quantile_cont(idle_interval, 0.25) AS p25, quantile_cont(idle_interval, 0.5) AS p50,
       quantile_cont(idle_interval, 0.75) AS p75, max(idle_interval) AS max
FROM g GROUP BY ALL ORDER BY rank, stream, idle_category
"""

# Time under each combination of kernel types running at once (HTA's bit-flag sweep:
# COMPUTATION 1, COMMUNICATION 2, MEMORY 4, named in that order).
KERNEL_TYPES = """
WITH m AS {merged_types},
ev AS (
  SELECT rank, ts AS t, bit AS d FROM m
  UNION ALL SELECT rank, e AS t, -bit AS d FROM m
), run AS (
  SELECT rank, t, sum(d) OVER (PARTITION BY rank ORDER BY t, d ROWS UNBOUNDED PRECEDING) AS running,
         lead(t) OVER (PARTITION BY rank ORDER BY t, d) AS next_t
  FROM ev
), per AS (
  SELECT rank, running, sum(next_t - t) AS time FROM run WHERE running > 0 GROUP BY ALL
)
SELECT rank, concat_ws(' overlapping ',
           CASE WHEN running & 1 > 0 THEN 'COMPUTATION' END,
           CASE WHEN running & 2 > 0 THEN 'COMMUNICATION' END,
           CASE WHEN running & 4 > 0 THEN 'MEMORY' END) AS kernel_type,
       time AS time_us
FROM per WHERE time > 0
"""

TYPE_BITS = "CASE ktype WHEN 'COMPUTATION' THEN 1 WHEN 'COMMUNICATION' THEN 2 WHEN 'MEMORY' THEN 4 END"

# Per kernel name and type (HTA's _aggr_gpu_kernel_time): beyond $num_kernels names, or past
# the $ratio quantile of the cumulative time, names fold into "others", whose max/min/mean/std
# are then over the folded names' sums, as HTA computes them.
KERNELS = """
WITH per AS (
  SELECT rank, ktype AS kernel_type, name, count(*) AS calls, sum(dur) AS sum, max(dur) AS max,
         min(dur) AS min, avg(dur) AS mean, coalesce(stddev_samp(dur), 0) AS std
  FROM {tl} WHERE ktype IN ($types) GROUP BY ALL
), ranked AS (
  SELECT *, row_number() OVER w - 1 AS idx, sum(sum) OVER (w ROWS UNBOUNDED PRECEDING) AS cum,
         count(*) OVER (PARTITION BY rank, kernel_type) AS names
  FROM per WINDOW w AS (PARTITION BY rank, kernel_type ORDER BY sum DESC, name)
), q AS (
  SELECT rank, kernel_type, quantile_cont(cum, $ratio) AS q FROM ranked GROUP BY ALL
), named AS (
  SELECT r.*, CASE WHEN r.names > $num_kernels AND (r.cum > q.q OR r.idx >= $num_kernels)
                   THEN 'others' ELSE r.name END AS label,
         r.names > $num_kernels AS folded
  FROM ranked r JOIN q USING (rank, kernel_type)
)
SELECT rank, kernel_type, label AS name, sum(calls) AS calls, sum(sum) AS sum_us,
       CASE WHEN any_value(folded) THEN max(sum) ELSE any_value(max) END AS max_us,
       CASE WHEN any_value(folded) THEN min(sum) ELSE any_value(min) END AS min_us,
       CASE WHEN any_value(folded) THEN avg(sum) ELSE any_value(mean) END AS mean_us,
       CASE WHEN any_value(folded) THEN coalesce(stddev_samp(sum), 0) ELSE any_value(std) END AS std_us
FROM named GROUP BY rank, kernel_type, label
ORDER BY kernel_type, name, rank
"""

OVERLAP = """
WITH comm AS {merged_comm}, comp AS {merged_comp},
ev AS (
  SELECT rank, ts AS t, 1 AS d FROM comm UNION ALL SELECT rank, e, -1 FROM comm
  UNION ALL SELECT rank, ts, 2 FROM comp UNION ALL SELECT rank, e, -2 FROM comp
), run AS (
  SELECT rank, t, sum(d) OVER (PARTITION BY rank ORDER BY t, d ROWS UNBOUNDED PRECEDING) AS running,
         lead(t) OVER (PARTITION BY rank ORDER BY t, d) AS next_t
  FROM ev
), ranks AS (SELECT DISTINCT rank FROM {tl})
SELECT ranks.rank, coalesce(o.overlap, 0) AS overlap_us, c.comm AS comm_us,
       round(100 * coalesce(o.overlap, 0) / c.comm, 2) AS comp_comm_overlap_pctg
FROM ranks
LEFT JOIN (SELECT rank, sum(next_t - t) AS overlap FROM run WHERE running = 3 GROUP BY rank) o USING (rank)
LEFT JOIN (SELECT rank, sum(e - ts) AS comm FROM comm GROUP BY rank) c USING (rank)
ORDER BY ranks.rank
"""

# HTA's get_cuda_kernel_launch_stats: launch delay = GPU start - launch call end, floored at 0.
LAUNCHES = """
SELECT rank, event_id, name, kind, stream, correlation, launch_e - launch_ts AS cpu_duration_us,
       dur AS gpu_duration_us, greatest(ts - launch_e, 0) AS launch_delay_us,
       ts - launch_ts AS launch_to_start_us
FROM {tl} WHERE launch_ts IS NOT NULL AND kind IN ('kernel', 'memcpy', 'memset')
"""

LAUNCH_SUMMARY = """
WITH l AS ({launches})
SELECT rank, count(*) AS launches, avg(launch_delay_us) AS mean_us,
       quantile_cont(launch_delay_us, 0.5) AS p50_us, quantile_cont(launch_delay_us, 0.9) AS p90_us,
       quantile_cont(launch_delay_us, 0.99) AS p99_us, max(launch_delay_us) AS max_us,
       count(*) FILTER (launch_delay_us > $delay_cutoff) AS delay_outliers,
       count(*) FILTER (cpu_duration_us > $runtime_cutoff) AS runtime_outliers,
       count(*) FILTER (cpu_duration_us <= $runtime_cutoff AND gpu_duration_us < cpu_duration_us)
         AS gpu_shorter_than_launch
FROM l GROUP BY rank ORDER BY rank
"""


# Every merged interval set in one table {m}: kset names the set (all events; COMPUTATION;
# COMMUNICATION; per kernel type, with the type's bit), so each is merged once per Timeline.
MERGED = f"""
CREATE OR REPLACE TEMP TABLE {{m}} AS
SELECT 'all' AS kset, rank, 0 AS bit, ts, e FROM {merged("{tl}", "rank")}
UNION ALL
SELECT 'comp', rank, 1, ts, e FROM {merged("(SELECT * FROM {tl} WHERE ktype = 'COMPUTATION')", "rank")}
UNION ALL
SELECT 'comm', rank, 2, ts, e FROM {merged("(SELECT * FROM {tl} WHERE ktype = 'COMMUNICATION')", "rank")}
UNION ALL
SELECT 'types', rank, bit, ts, e FROM {merged(
    "(SELECT *, " + TYPE_BITS + " AS bit FROM {tl} WHERE ktype IN "
    "('COMPUTATION', 'COMMUNICATION', 'MEMORY'))", "rank, bit")}
"""
