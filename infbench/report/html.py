"""`infbench report RUN --html FILE`: one self-contained page (inline CSS, inline chart code and
data, no network) with the run's stored diagnosis, distributions, token timeline, throughput,
concurrency and the server's own metrics over time. The charts are in `run_charts.py`, drawn
by `charts.py` (interactive, see there for why uPlot)."""

from __future__ import annotations

import html
import json
from pathlib import Path

import duckdb

from infbench.report import charts
from infbench.report.diagnosis import CSS as DIAGNOSIS_CSS
from infbench.report.diagnosis import diagnosis_section, headline_block
from infbench.report.run_charts import run_charts
from infbench.report.tenants_view import html_tables
from infbench.store.runs import RunRow

_CSS = ("body{font-family:sans-serif;margin:20px 24px;color:#222}"
        "h1{font-size:20px}h2{font-size:16px;margin-top:28px;border-bottom:1px solid #ddd}"
        "table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ddd;padding:3px 8px;text-align:right}"
        "td:first-child,th:first-child{text-align:left}"
        ".bad{background:#c00;color:#fff;padding:4px 8px;font-weight:bold}pre{font-size:11px;background:#f6f6f6;padding:8px;overflow:auto}")

_DEFINITIONS = ("<p style='font-size:12px'>ITL: the gap before each socket read spread over the tokens "
                "that read delivered, so tokens a busy client read together keep the server's spacing; "
                "per event (vLLM's definition) they are 0 ms apart. E2E and TPOT end at the last event "
                "that carries choices, not at usage or [DONE].</p>")


def _num(v: object) -> str:
    return "-" if v is None else f"{float(v):.2f}"  # type: ignore[arg-type]  # a stored number (or its text): float() refuses anything else


def fleet_table(fleet: dict | None) -> str:
    """A fleet run's replicas and the fleet: share, failures, load met, latency percentiles."""
    if not fleet:
        return ""
    route = fleet.get("route") or {}
    cols = ("replica", "sent", "share", "failed", "mean in flight at send", "TTFT p50", "TTFT p99",
            "TPOT p50", "TPOT p99", "E2E p99")
    keys = ("median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "p99_tpot_ms", "p99_e2el_ms")
    body = ""
    for name, r in [(r.get("name"), r) for r in fleet.get("replicas", [])] + [("fleet", fleet.get("fleet") or {})]:
        share = r.get("share", 1.0 if name == "fleet" else None)
        body += (f"<tr><td>{html.escape(str(name))}</td><td>{r.get('requests_sent', 0)}</td>"
                 f"<td>{'-' if share is None else f'{share:.0%}'}</td><td>{r.get('failed', 0)}</td>"
                 f"<td>{_num(r.get('mean_concurrency'))}</td>"
                 + "".join(f"<td>{_num(r.get(k))}</td>" for k in keys) + "</tr>")
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    return (f"<h2>Replicas (route: {html.escape(str(route.get('kind', '?')))})</h2>"
            f"<table><tr>{head}</tr>{body}</table><p style='font-size:12px'>Latencies in ms, as "
            "the clients saw them; <code>infbench diagnose replicas</code> compares replicas at "
            "equal load.</p>")


def build_html(con: duckdb.DuckDBPyConnection, run: RunRow) -> str:
    rid = run.run_id
    s = run.summary or {}
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
             f"<th>p99.9</th></tr>{rows}</table>{_DEFINITIONS}{notes}{fleet_table(s.get('fleet'))}"
             f"{html_tables(s)}")
    cfg = html.escape(json.dumps(run.config, indent=2, sort_keys=True))
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>infbench {html.escape(rid)}</title>"
            f"<style>{_CSS}{DIAGNOSIS_CSS}</style>{charts.page_head()}</head><body>{headline_block(con, rid)}{head}{table}"
            f"{diagnosis_section(con, rid)}"
            f"<h2>Plots</h2>{charts.render(run_charts(con, run))}"
            f"<h2>Configuration</h2><pre>{cfg}</pre></body></html>")


def write_html_report(con: duckdb.DuckDBPyConnection, run: RunRow, path: Path) -> None:
    path.write_text(build_html(con, run), encoding="utf-8")
