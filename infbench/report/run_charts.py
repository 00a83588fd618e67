"""The run report's charts: what the store holds about one run, as `charts.Chart`s, one unit
per axis (server gauges in requests beside KV cache use in %, never on one axis)."""

from __future__ import annotations

from typing import Any

import duckdb
import numpy as np

from infbench.report.charts import Axis, Chart, Series, histogram, peaks
from infbench.report.gpu_charts import gpu_charts
from infbench.report.link_charts import run_link_charts
from infbench.store.runs import RunRow

TIME = Axis("time since run start", "s")
MS = "ms"

# Server series worth plotting when a vLLM-compatible /metrics was scraped: legend name, the
# unit (which decides the axis or chart), and the factor to that unit (fractions to %).
SERVER_SERIES: dict[str, tuple[str, str, float]] = {
    "vllm:num_requests_running": ("running", "requests", 1.0),
    "vllm:num_requests_waiting": ("waiting", "requests", 1.0),
    "vllm:kv_cache_usage_perc": ("KV cache used", "%", 100.0),
    "vllm:gpu_cache_usage_perc": ("GPU cache used", "%", 100.0),
    "vllm:num_preemptions_total": ("preemptions", "preemptions", 1.0),
    "vllm:num_preemptions": ("preemptions", "preemptions", 1.0),
}


def _q(con: duckdb.DuckDBPyConnection, sql: str, params: list[object]) -> dict[str, np.ndarray]:
    """Columns as float arrays, NULL as NaN (booleans stay booleans, NULL as False)."""
    out = {}
    for k, v in con.execute(sql, params).fetchnumpy().items():
        m = np.ma.asarray(v)
        out[k] = np.ma.filled(m, False) if m.dtype == bool else np.ma.filled(m.astype(float), np.nan)
    return out


def distributions(con: duckdb.DuckDBPyConnection, rid: str, s: dict[str, Any]) -> list[Chart]:
    ok = "run_id = ? AND phase = 'measure' AND error_class IS NULL"
    lat = _q(con, f"SELECT ttft_ms, tpot_ms, e2e_ms FROM request_latency WHERE {ok}", [rid])
    itl = _q(con, "SELECT i.itl_ms FROM itl i JOIN requests r USING (run_id, request_idx) WHERE i.run_id = ? "
                  "AND r.phase = 'measure' AND r.error_class IS NULL AND i.itl_ms IS NOT NULL", [rid])

    def marks(name: str) -> dict[str, float | None]:
        return {k: s.get(f"{k}_{name}_ms") for k in ("p50", "p99")}

    return [
        histogram(lat["ttft_ms"], "TTFT distribution", Axis("TTFT from actual send", MS), "requests",
                  marks=marks("ttft")),
        histogram(itl["itl_ms"], "ITL distribution", Axis("ITL, each read's gap spread over its tokens", MS),
                  "tokens", marks=marks("itl")),
        histogram(lat["e2e_ms"], "End-to-end latency distribution", Axis("end-to-end latency", MS),
                  "requests", marks=marks("e2el")),
        histogram(lat["tpot_ms"], "TPOT distribution", Axis("time per output token", MS), "requests",
                  marks=marks("tpot")),
    ]


def timeline(con: duckdb.DuckDBPyConnection, rid: str, max_points: int = 20000) -> Chart:
    tl = _q(con, "SELECT t_ns / 1e9 AS t, request_idx, coalesced FROM chunks WHERE run_id = ? AND content", [rid])
    t, r, co = tl["t"], tl["request_idx"], np.asarray(tl["coalesced"], bool)
    note = "One dot per content chunk. Red: it arrived in the same socket read as the chunk before it."
    if len(t) > max_points:
        keep = np.sort(np.random.default_rng(0).choice(len(t), max_points, replace=False))
        t, r, co = t[keep], r[keep], co[keep]
        note += f" A random {max_points:,} of {len(tl['t']):,} chunks are shown."
    own = np.where(co, np.nan, r)
    shared = np.where(co, r, np.nan)
    return Chart("Token arrival timeline", TIME, [Axis("request index", "request #")],
                 [Series("own read", t, own, style="points"), Series("shared a read", t, shared, style="points")],
                 note=note, wide=True)


def throughput(con: duckdb.DuckDBPyConnection, rid: str) -> Chart:
    per_s = _q(con, """
        SELECT floor(last_chunk_ns / 1e9) AS sec, count(*) AS done, sum(output_tokens) AS toks
        FROM requests WHERE run_id = ? AND error_class IS NULL AND last_chunk_ns IS NOT NULL
        GROUP BY 1 ORDER BY 1""", [rid])
    return Chart("Throughput over time", TIME,
                 [Axis("completions", "requests/s"), Axis("output tokens", "tokens/s")],
                 [Series("requests completed", per_s["sec"], per_s["done"], style="step"),
                  Series("output tokens", per_s["sec"], per_s["toks"], axis=1, style="step")],
                 note="Per whole second of the run, by when each request's last chunk arrived.")


def concurrency(con: duckdb.DuckDBPyConnection, rid: str) -> Chart:
    c = _q(con, """
        WITH ev AS (SELECT send_ns AS t, 1 AS d FROM requests WHERE run_id = ? AND send_ns IS NOT NULL
                    UNION ALL SELECT end_ns, -1 FROM requests WHERE run_id = ? AND send_ns IS NOT NULL AND end_ns IS NOT NULL)
        SELECT t / 1e9 AS t, sum(d) OVER (ORDER BY t ROWS UNBOUNDED PRECEDING) AS c FROM ev ORDER BY t""", [rid, rid])
    x, y = peaks(c["t"], c["c"])
    return Chart("Requests in flight", TIME, [Axis("in flight", "requests")],
                 [Series("in flight", x, y, style="step")])


def client_health(con: duckdb.DuckDBPyConnection, rid: str) -> Chart:
    h = _q(con, "SELECT t_ns / 1e9 AS t, loop_lag_ms, cpu_percent, schedule_lag_ms FROM client_samples "
                "WHERE run_id = ? ORDER BY t_ns", [rid])
    return Chart("Client health", TIME, [Axis("lag, max per interval", MS), Axis("client CPU", "% of a core")],
                 [Series("event-loop lag", h["t"], h["loop_lag_ms"]),
                  Series("schedule lag", h["t"], h["schedule_lag_ms"]),
                  Series("CPU", h["t"], h["cpu_percent"], axis=1)])


def server(con: duckdb.DuckDBPyConnection, rid: str) -> list[Chart]:
    names = [r[0] for r in con.execute(
        "SELECT DISTINCT name FROM metric_samples WHERE run_id = ? AND list_contains(?, name) ORDER BY 1",
        [rid, list(SERVER_SERIES)]).fetchall()]
    by_unit: dict[str, list[Series]] = {}
    for name in names:
        label, unit, factor = SERVER_SERIES[name]
        m = _q(con, "SELECT t_ns / 1e9 AS t, sum(value) AS v FROM metric_samples WHERE run_id = ? AND name = ? "
                    "GROUP BY t_ns ORDER BY t_ns", [rid, name])
        by_unit.setdefault(unit, []).append(Series(label, m["t"], m["v"] * factor, axis=int(unit == "%"),
                                                   style="step"))
    title = "Server queue and KV cache (scraped /metrics)"
    if not names:
        return [Chart(title, TIME, [Axis("requests", "requests")], empty="no vLLM-compatible gauges were scraped")]
    charts = []
    if "requests" in by_unit or "%" in by_unit:
        charts.append(Chart(title, TIME, [Axis("requests", "requests"), Axis("KV cache used", "%", min=0)],
                            by_unit.get("requests", []) + by_unit.get("%", [])))
    if "preemptions" in by_unit:
        pre = by_unit["preemptions"]
        none = not any(np.nanmax(s.y, initial=0) > np.nanmin(s.y, initial=0) for s in pre)
        charts.append(Chart("Preemptions since the server started (scraped /metrics)", TIME,
                            [Axis("preemptions", "preemptions")], pre,
                            note="No preemptions during the run." if none else ""))
    return charts


def engine_steps(con: duckdb.DuckDBPyConnection, run: RunRow) -> list[Chart]:
    st = _q(con, "SELECT (start_s * 1e9 - ?) / 1e9 AS t, (end_s - start_s) * 1e3 AS ms, num_running "
                 "FROM engine_steps WHERE run_id = ? ORDER BY step_id", [run.t0_monotonic_ns, run.run_id])
    if not len(st["t"]):
        return []
    note = ""
    if len(st["t"]) > 2000:
        note = f"{len(st['t']):,} steps: the longest step of each 1/2,000 of them is drawn, so stalls show."
    t, ms = peaks(st["t"], st["ms"])
    t2, running = peaks(st["t"], st["num_running"])
    return [Chart("Engine steps (reference engine step log)", TIME,
                  [Axis("step time", MS), Axis("running", "sequences")],
                  [Series("step time", t, ms), Series("running sequences", t2, running, axis=1, style="step")],
                  note=note, wide=True)]


def run_charts(con: duckdb.DuckDBPyConnection, run: RunRow) -> list[Chart]:
    rid, s = run.run_id, run.summary or {}
    return [*distributions(con, rid, s), timeline(con, rid), throughput(con, rid), concurrency(con, rid),
            client_health(con, rid), *server(con, rid), *engine_steps(con, run), *gpu_charts(con, rid),
            *run_link_charts(con, rid)]
