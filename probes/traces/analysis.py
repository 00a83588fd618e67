"""Timeline analysis of an imported trace, per rank, in SQL over the store's trace tables.

    tl = Timeline(con, trace_id)          # or "last"
    tl.temporal_breakdown()               # pandas DataFrames (DuckDB's .df())
    tl.idle_time_breakdown(); tl.kernel_type_breakdown(); tl.comm_comp_overlap() ...

The definitions are HTA's (see `timeline_sql`), so numbers can be checked against it; every
method has a `*_sql` twin so the CLI prints, and a user can rerun, exactly what was computed.
`Timeline.query(name)` gives (columns, rows) without pandas, for the CLI.
"""

from __future__ import annotations

import uuid
from typing import Any

import duckdb

from probes.traces import timeline_sql as q
from probes.traces.errors import TraceError
from probes.traces.steps_sql import CPU_STEPS, STEPS
from probes.traces.timeline_sql import ANALYSES  # noqa: F401 - its public name here too

STEP_PATTERN = r"^(ProfilerStep|step|engine_step)\s*#\s*\d+"


def resolve_trace(con: duckdb.DuckDBPyConnection, ref: str) -> str:
    """A trace id from an id, a unique prefix, 'last', or a run id the trace is linked to."""
    if ref == "last":
        row = con.execute("SELECT trace_id FROM traces ORDER BY imported_at DESC LIMIT 1").fetchone()
        if row is None:
            raise TraceError("no traces in this store (import one with `infbench trace import`)")
        return str(row[0])
    rows = con.execute("SELECT trace_id FROM traces WHERE trace_id = ? OR starts_with(trace_id, ?) "
                       "OR run_id = ? ORDER BY imported_at DESC", [ref, ref, ref]).fetchall()
    exact = [r[0] for r in rows if r[0] == ref]
    if exact:
        return str(exact[0])
    if not rows:
        raise TraceError(f"trace {ref!r}: not in this store (`infbench trace list` shows them)")
    if len({r[0] for r in rows}) > 1 and not con.execute(
            "SELECT 1 FROM traces WHERE run_id = ?", [ref]).fetchone():
        raise TraceError(f"trace {ref!r}: ambiguous prefix ({len(rows)} traces match)")
    return str(rows[0][0])


class Timeline:
    """The analysed GPU events of one trace (a temp table built once), and the analyses.

    Ownership: borrows `con` (the caller closes it); `close()` drops the temp table."""

    def __init__(self, con: duckdb.DuckDBPyConnection, trace: str) -> None:
        self.con = con
        self.trace_id = resolve_trace(con, trace)
        self.table = f"_timeline_{uuid.uuid4().hex[:10]}"
        self._sub = {"tl": self.table}
        self._merged: str | None = None  # built on first use by an analysis that needs it
        # CREATE ... AS answers with its row count: no second statement to count the events.
        self.events = int(con.execute(
            self._render(q.EVENTS.replace("{tl}", self.table))).fetchall()[0][0])
        # A CPU-only profile (the torch executor on a CPU) has steps and CPU ops but no GPU
        # events: only `cpu_steps` applies to it.
        self.cpu_only = self.events == 0
        if self.cpu_only and not con.execute(
                "SELECT count(*) FROM trace_cpu_ops WHERE trace_id = ?", [self.trace_id]).fetchall()[0][0]:
            self.close()
            raise TraceError(f"trace {self.trace_id}: no GPU events or CPU ops to analyse")

    def close(self) -> None:
        self.con.execute(f"DROP TABLE IF EXISTS {self.table}")
        if self._merged is not None:
            self.con.execute(f"DROP TABLE IF EXISTS {self._merged}")

    def __enter__(self) -> Timeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- SQL ------------------------------------------------------------------------------
    def _render(self, sql: str, **params: Any) -> str:
        params = {"trace_id": self.trace_id, **params}
        for k in sorted(params, key=len, reverse=True):
            v = params[k]
            lit = "'" + v.replace("'", "''") + "'" if isinstance(v, str) else repr(v)
            sql = sql.replace(f"${k}", lit)
        return sql

    def _merged_table(self) -> str:
        """The merged busy intervals (HTA's merge_kernel_intervals) of every kernel set the
        analyses use - all, computation, communication, and per kernel type - built in one
        statement the first time an analysis needs them and shared by the others (temporal,
        kernel types and overlap each merged again before: most of their cost on a small
        trace was planning those window queries, not running them)."""
        if self._merged is None:
            name = f"{self.table}_merged"
            self.con.execute(q.MERGED.replace("{m}", name).replace("{tl}", self.table))
            self._merged = name
        return self._merged

    def _fill(self, sql: str, **extra: str) -> str:
        t = self.table
        subs = dict(extra)
        if "{merged_" in sql:
            m = self._merged_table()
            subs.update({f"{{merged_{s}}}": f"(SELECT rank, bit, ts, e FROM {m} WHERE kset = '{s}')"
                         for s in ("all", "comp", "comm", "types")})
        subs["{tl}"] = t
        for k, v in subs.items():
            sql = sql.replace(k, v)
        return sql

    def temporal_sql(self) -> str:
        return self._fill(q.TEMPORAL)

    def idle_sql(self, consecutive_kernel_delay_us: float = 30) -> str:
        gaps = self._render(self._fill(q.IDLE_GAPS), delay=float(consecutive_kernel_delay_us))
        return self._fill(q.IDLE, **{"{gaps}": gaps})

    def idle_stats_sql(self, consecutive_kernel_delay_us: float = 30) -> str:
        gaps = self._render(self._fill(q.IDLE_GAPS), delay=float(consecutive_kernel_delay_us))
        return self._fill(q.IDLE_STATS, **{"{gaps}": gaps})

    def kernel_types_sql(self) -> str:
        return self._fill(q.KERNEL_TYPES)

    def kernel_types_all_ranks_sql(self) -> str:
        # HTA's kernel-type table sums over all ranks; percentages of that total, 1 decimal.
        return (f"WITH r AS ({self.kernel_types_sql()}), s AS (SELECT kernel_type, sum(time_us) "
                "AS sum_us FROM r GROUP BY ALL) SELECT kernel_type, sum_us, round(100 * sum_us / "
                "sum(sum_us) OVER (), 1) AS percentage FROM s ORDER BY sum_us DESC")

    def kernels_sql(self, num_kernels: int = 10, duration_ratio: float = 0.8,
                    include_memory: bool = True) -> str:
        types = "'COMPUTATION', 'COMMUNICATION'" + (", 'MEMORY'" if include_memory else "")
        return self._render(self._fill(q.KERNELS).replace("$types", types),
                            num_kernels=int(num_kernels), ratio=float(duration_ratio))

    def overlap_sql(self) -> str:
        return self._fill(q.OVERLAP)

    def launches_sql(self) -> str:
        return self._fill(q.LAUNCHES)

    def launch_summary_sql(self, runtime_cutoff_us: float = 50,
                           launch_delay_cutoff_us: float = 100) -> str:
        return self._render(self._fill(q.LAUNCH_SUMMARY, **{"{launches}": self.launches_sql()}),
                            runtime_cutoff=float(runtime_cutoff_us),
                            delay_cutoff=float(launch_delay_cutoff_us))

    def steps_sql(self, step_pattern: str = STEP_PATTERN, cpu_bound_idle_share: float = 0.5) -> str:
        return self._render(self._fill(STEPS), pattern=step_pattern,
                            share=float(cpu_bound_idle_share))

    def cpu_steps_sql(self, step_pattern: str = STEP_PATTERN) -> str:
        return self._render(CPU_STEPS, pattern=step_pattern)

    # ---- results --------------------------------------------------------------------------
    def _df(self, sql: str) -> Any:
        return self.con.sql(sql).df()

    def temporal_breakdown(self) -> Any:
        """Per rank: kernel time (first GPU event start to last end), idle (no GPU event
        running), compute (COMPUTATION kernels running) and the rest, in us and percent."""
        return self._df(self.temporal_sql())

    def idle_time_breakdown(self, consecutive_kernel_delay_us: float = 30) -> Any:
        """Per rank and stream: idle time before kernels by cause (host_wait, kernel_wait,
        other) and its share of the stream's idle time (NaN for a stream never idle)."""
        return self._df(self.idle_sql(consecutive_kernel_delay_us))

    def idle_interval_stats(self, consecutive_kernel_delay_us: float = 30) -> Any:
        return self._df(self.idle_stats_sql(consecutive_kernel_delay_us))

    def kernel_type_breakdown(self, all_ranks: bool = True) -> Any:
        """Time under each kernel type and each overlap of types; summed over ranks with
        percentages (HTA's table), or per rank."""
        return self._df(self.kernel_types_all_ranks_sql() if all_ranks else self.kernel_types_sql())

    def kernel_breakdown(self, num_kernels: int = 10, duration_ratio: float = 0.8,
                         include_memory: bool = True) -> Any:
        """Per rank, kernel type and kernel name: calls, sum/max/min/mean/std of durations;
        the tail folded into "others" as HTA does."""
        return self._df(self.kernels_sql(num_kernels, duration_ratio, include_memory))

    def comm_comp_overlap(self) -> Any:
        """Per rank: share of communication time during which computation also ran."""
        return self._df(self.overlap_sql())

    def launch_delays(self) -> Any:
        """Per GPU op with its launch call: CPU duration of the call, GPU duration, and the
        launch delay (kernel start - call end, floored at 0)."""
        return self._df(self.launches_sql())

    def launch_summary(self, runtime_cutoff_us: float = 50, launch_delay_cutoff_us: float = 100) -> Any:
        return self._df(self.launch_summary_sql(runtime_cutoff_us, launch_delay_cutoff_us))

    def cpu_bound_steps(self, step_pattern: str = STEP_PATTERN, cpu_bound_idle_share: float = 0.5) -> Any:
        """Per annotated step: the GPU span of the kernels it launched, how much of it the GPU
        sat idle, the largest gap; a step is CPU-bound when idle >= the share given."""
        return self._df(self.steps_sql(step_pattern, cpu_bound_idle_share))

    def cpu_steps(self, step_pattern: str = STEP_PATTERN) -> Any:
        """Per annotated step of a CPU-only profile: its CPU ops and the share of the step
        they cover (the rest is the engine's own code between ops)."""
        return self._df(self.cpu_steps_sql(step_pattern))

    def query(self, name: str, **kw: Any) -> tuple[list[str], list[tuple[Any, ...]], str]:
        """(columns, rows, sql) of one analysis by name (see ANALYSES), without pandas."""
        if self.cpu_only and name != "cpu_steps":
            raise TraceError(f"trace {self.trace_id}: a CPU-only profile (no GPU events); "
                             f"'{name}' needs GPU kernels, only 'cpu_steps' applies")
        sql = {"temporal": self.temporal_sql, "idle": self.idle_sql,
               "idle_stats": self.idle_stats_sql, "kernel_types": self.kernel_types_all_ranks_sql,
               "kernels": self.kernels_sql, "overlap": self.overlap_sql,
               "launch_summary": self.launch_summary_sql, "steps": self.steps_sql,
               "cpu_steps": self.cpu_steps_sql}[name](**kw)
        rel = self.con.sql(sql)
        return list(rel.columns), rel.fetchall(), sql
