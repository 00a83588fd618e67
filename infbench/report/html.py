"""`infbench report RUN --html FILE`: one self-contained page (inline SVG, inline CSS, no JS,
no network) with the run's stored diagnosis, distributions, token timeline, throughput,
concurrency and the server's own metrics over time."""

from __future__ import annotations

import html
import json
from pathlib import Path

import duckdb
import numpy as np

from infbench.report import svg
from infbench.report.diagnosis import CSS as DIAGNOSIS_CSS
from infbench.report.diagnosis import diagnosis_section
from infbench.store.runs import RunRow

_CSS = ("body{font-family:sans-serif;max-width:1500px;margin:20px auto;color:#222}"
        "h1{font-size:20px}h2{font-size:16px;margin-top:28px;border-bottom:1px solid #ddd}"
        "table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ddd;padding:3px 8px;text-align:right}"
        "td:first-child,th:first-child{text-align:left}.grid{display:flex;flex-wrap:wrap;gap:12px}"
        ".bad{background:#c00;color:#fff;padding:4px 8px;font-weight:bold}pre{font-size:11px;background:#f6f6f6;padding:8px;overflow:auto}")

# Server gauges worth plotting when a vLLM-compatible /metrics was scraped.
_SERVER_GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:gpu_cache_usage_perc",
                  "vllm:kv_cache_usage_perc", "vllm:num_preemptions_total")


_DEFINITIONS = ("<p style='font-size:12px'>ITL: the gap before each socket read spread over the tokens "
                "that read delivered, so tokens a busy client read together keep the server's spacing; "
                "per event (vLLM's definition) they are 0 ms apart. E2E and TPOT end at the last event "
                "that carries choices, not at usage or [DONE].</p>")


def _col(con: duckdb.DuckDBPyConnection, sql: str, params: list[object]) -> dict[str, np.ndarray]:
    return con.execute(sql, params).fetchnumpy()


def _num(v: object) -> str:
    return "-" if v is None else f"{float(v):.2f}"  # type: ignore[arg-type]


def _f(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, dtype=float)


def build_html(con: duckdb.DuckDBPyConnection, run: RunRow) -> str:
    rid = run.run_id
    s = run.summary or {}
    ok = "run_id = ? AND phase = 'measure' AND error_class IS NULL"
    lat = _col(con, f"SELECT ttft_ms, ttft_intended_ms, tpot_ms, e2e_ms FROM request_latency WHERE {ok}", [rid])
    itl = _col(con, "SELECT i.itl_ms FROM itl i JOIN requests r USING (run_id, request_idx) "
                    "WHERE i.run_id = ? AND r.phase = 'measure' AND r.error_class IS NULL AND i.itl_ms IS NOT NULL", [rid])
    plots: list[tuple[str, str]] = []

    def marks(name: str) -> dict[str, float]:
        return {k: s.get(f"{k}_{name}_ms") for k in ("p50", "p99")}  # type: ignore[misc]

    plots.append(("TTFT", svg.histogram(_f(lat["ttft_ms"]), "TTFT distribution", "ms from actual send", marks=marks("ttft"))))
    plots.append(("ITL", svg.histogram(_f(itl["itl_ms"]), "ITL distribution",
                                       "ms per token (each read's gap spread over its tokens)", marks=marks("itl"))))
    plots.append(("E2E", svg.histogram(_f(lat["e2e_ms"]), "End-to-end latency distribution", "ms", marks=marks("e2el"))))
    plots.append(("TPOT", svg.histogram(_f(lat["tpot_ms"]), "TPOT distribution", "ms per output token", marks=marks("tpot"))))

    tl = _col(con, "SELECT t_ns / 1e9 AS t, request_idx, coalesced FROM chunks WHERE run_id = ? AND content", [rid])
    plots.append(("timeline", svg.scatter(_f(tl["t"]), _f(tl["request_idx"]), "Token arrival timeline "
                                          "(one dot per content chunk; red = arrived in the same read as the previous)",
                                          "s since run start", "request", highlight=np.asarray(tl["coalesced"], bool))))

    per_s = _col(con, """
        SELECT floor(last_chunk_ns / 1e9) AS sec, count(*) AS done, sum(output_tokens) AS toks
        FROM requests WHERE run_id = ? AND error_class IS NULL AND last_chunk_ns IS NOT NULL
        GROUP BY 1 ORDER BY 1""", [rid])
    plots.append(("throughput", svg.lines([
        ("requests/s", _f(per_s["sec"]), _f(per_s["done"])),
        ("output tokens/s ÷ 100", _f(per_s["sec"]), _f(per_s["toks"]) / 100.0)],
        "Throughput over time (completions per second)", "s since run start", "per second")))

    conc = _col(con, """
        WITH ev AS (SELECT send_ns AS t, 1 AS d FROM requests WHERE run_id = ? AND send_ns IS NOT NULL
                    UNION ALL SELECT end_ns, -1 FROM requests WHERE run_id = ? AND send_ns IS NOT NULL AND end_ns IS NOT NULL)
        SELECT t / 1e9 AS t, sum(d) OVER (ORDER BY t ROWS UNBOUNDED PRECEDING) AS c FROM ev ORDER BY t""", [rid, rid])
    plots.append(("concurrency", svg.lines([("in flight", _f(conc["t"]), _f(conc["c"]))],
                                           "Requests in flight", "s since run start", "requests")))

    health = _col(con, "SELECT t_ns / 1e9 AS t, loop_lag_ms, cpu_percent, schedule_lag_ms FROM client_samples "
                       "WHERE run_id = ? ORDER BY t_ns", [rid])
    plots.append(("client", svg.lines([
        ("CPU % of a core", _f(health["t"]), _f(health["cpu_percent"])),
        ("event-loop lag ms (max/interval)", _f(health["t"]), _f(health["loop_lag_ms"])),
        ("schedule lag ms (max/interval)", _f(health["t"]), _f(health["schedule_lag_ms"]))],
        "Client health", "s since run start", "")))

    names = [r[0] for r in con.execute(
        "SELECT DISTINCT name FROM metric_samples WHERE run_id = ? AND list_contains(?, name) ORDER BY 1",
        [rid, list(_SERVER_GAUGES)]).fetchall()]
    series = []
    for name in names:
        m = _col(con, "SELECT t_ns / 1e9 AS t, sum(value) AS v FROM metric_samples WHERE run_id = ? AND name = ? "
                      "GROUP BY t_ns ORDER BY t_ns", [rid, name])
        series.append((name, _f(m["t"]), _f(m["v"])))
    plots.append(("server", svg.lines(series, "Server metrics over time (scraped /metrics)", "s since run start", "")
                  if series else svg.empty("Server metrics over time", "no vLLM-compatible gauges were scraped")))

    steps = _col(con, "SELECT (start_s * 1e9 - ?) / 1e9 AS t, (end_s - start_s) * 1e3 AS ms, num_running "
                      "FROM engine_steps WHERE run_id = ? ORDER BY step_id", [run.t0_monotonic_ns, rid])
    if len(steps["t"]):
        plots.append(("steps", svg.lines([("step time ms", _f(steps["t"]), _f(steps["ms"])),
                                           ("running seqs", _f(steps["t"]), _f(steps["num_running"]))],
                                          "Engine steps (reference engine step log)", "s since run start", "")))

    figures = [("", "ttft", "TTFT"), ("", "ttft_intended", "TTFT from intended"), ("", "itl", "ITL"),
               ("raw_", "itl", "ITL per event (raw, 0 inside a read)"), ("", "tpot", "TPOT"), ("", "e2el", "E2E"),
               ("", "e2el_intended", "E2E from intended"), ("", "trailing", "usage/[DONE] after the last choices event")]
    rows = "".join(
        f"<tr><td>{html.escape(label)}</td>" + "".join(
            f"<td>{_num(s.get(f'{prefix}{c}_{key}_ms'))}</td>"
            for c in ("mean", "p50", "p90", "p95", "p99", "p99.9")) + "</tr>"
        for prefix, key, label in figures
        # figures newer than the summary a run stored are left out, not shown empty
        if (prefix, key) not in (("raw_", "itl"), ("", "trailing")) or f"{prefix}mean_{key}_ms" in s)
    bound = ""
    if s.get("client_bound"):
        reasons = "; ".join(s["client_health"]["client_bound_reasons"])
        bound = f'<p class="bad">CLIENT-BOUND: {html.escape(reasons)}</p>'
    head = (f"<h1>infbench run {html.escape(rid)}</h1><p>{html.escape(run.status)}"
            f"{' — ' + html.escape(run.status_reason) if run.status_reason else ''} · model "
            f"{html.escape(run.model or '')} at {html.escape(run.target_url or '')} · "
            f"{s.get('completed', 0)} completed, {s.get('failed', 0)} failed in {s.get('duration', 0):.1f}s · "
            f"{s.get('request_throughput', 0):.2f} req/s · {s.get('output_throughput', 0):,.0f} output tok/s · "
            f"{s.get('coalesced_fraction', 0):.1%} of tokens shared a socket read</p>{bound}")
    bound_reasons = (s.get("client_health") or {}).get("client_bound_reasons", [])
    notes = "".join(f"<li>{html.escape(w)}</li>" for w in s.get("warnings", []) if w not in bound_reasons)
    notes = f"<ul>{notes}</ul>" if notes else ""
    table = ("<table><tr><th>latency (ms)</th><th>mean</th><th>p50</th><th>p90</th><th>p95</th><th>p99</th>"
             f"<th>p99.9</th></tr>{rows}</table>{_DEFINITIONS}{notes}")
    body = "".join(f'<div>{p}</div>' for _, p in plots)
    cfg = html.escape(json.dumps(run.config, indent=2, sort_keys=True))
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>infbench {html.escape(rid)}</title>"
            f"<style>{_CSS}{DIAGNOSIS_CSS}</style></head><body>{head}{table}{diagnosis_section(con, rid)}"
            f"<h2>Plots</h2><div class='grid'>{body}</div>"
            f"<h2>Configuration</h2><pre>{cfg}</pre></body></html>")


def write_html_report(con: duckdb.DuckDBPyConnection, run: RunRow, path: Path) -> None:
    path.write_text(build_html(con, run), encoding="utf-8")
