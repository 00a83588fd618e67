"""The sweep's page: latency against throughput with the knee and the goodput maximum marked
(or why there is no knee), throughput and goodput against load, throughput against the decode
batch, and the step-time line beside the roofline's. Interactive charts, no network
(`infbench.report.charts`)."""

from __future__ import annotations

import html
from typing import Any

import numpy as np

from infbench.report.charts import COLORS, Axis, Chart, Mark, Series, human, page_head, render

THROUGHPUT = Axis("output throughput", "tokens/s")
KNEE_COLOR, BEST_COLOR = COLORS[1], COLORS[2]


def _load(p: dict[str, Any]) -> str:
    return f"c={p['value']:g}" if p["kind"] == "concurrency" else f"{human(p['value'])} req/s"


def _arr(pts: list[dict[str, Any]], key: str) -> np.ndarray:
    return np.array([np.nan if p[key] is None else p[key] for p in pts], float)


def _knee_note(result: dict[str, Any], why: bool = True) -> str:
    """Why a chart shows no knee; "" when it has one."""
    sat = result.get("saturation") or {}
    if result.get("knee"):
        return ""
    head = "No knee: not saturated." if sat and not sat.get("reached") else "No knee named."
    reason = str(sat.get("reason") or "").removeprefix("not saturated: ")
    return f"{head} {reason[:1].upper()}{reason[1:]}" if why and reason else head


def _marks(result: dict[str, Any], key: str, kind: str | None = None) -> list[Mark]:
    """The knee and the goodput maximum at their `key` value (a point field)."""
    out = []
    for name, field, color in (("knee", "knee", KNEE_COLOR), ("goodput max", "goodput_max", BEST_COLOR)):
        p = result.get(field)
        if p and (kind is None or p["kind"] == kind) and p.get(key) is not None:
            out.append(Mark(float(p[key]), f"{name} ({_load(p)})", color))
    return out


def latency_charts(result: dict[str, Any]) -> list[Chart]:
    pts = sorted(result["points"], key=lambda p: p["output_throughput"])
    thr = _arr(pts, "output_throughput")
    note, marks = _knee_note(result), _marks(result, "output_throughput")
    names = [_load(p) for p in pts]

    def dots(name: str, key: str) -> Series:
        return Series(name, thr, _arr(pts, key), style="points", markers=True)

    # Dots, not a line: past saturation throughput stalls or falls while latency climbs, so a
    # line in throughput order would double back; hover names each point's load.
    short = _knee_note(result, why=False)
    return [Chart("End-to-end latency against throughput", THROUGHPUT, [Axis("end-to-end latency", "ms")],
                  [dots("p50 E2E", "p50_e2el_ms"), dots("p99 E2E", "p99_e2el_ms")], note=note, marks=marks,
                  point_names=names),
            Chart("Per-token latency against throughput", THROUGHPUT, [Axis("time per output token", "ms")],
                  [dots("p50 TPOT", "p50_tpot_ms"), dots("p50 ITL", "p50_itl_ms")], note=short, marks=marks,
                  point_names=names),
            Chart("Time to first token against throughput", THROUGHPUT, [Axis("TTFT", "ms")],
                  [dots("p50 TTFT", "p50_ttft_ms"), dots("p99 TTFT", "p99_ttft_ms")], note=short, marks=marks,
                  point_names=names)]


def load_charts(result: dict[str, Any]) -> list[Chart]:
    """Throughput and goodput against the load that produced them, one chart per load kind."""
    out = []
    for kind, axis in (("concurrency", Axis("concurrency", "requests in flight", log=True)),
                       ("rate", Axis("offered rate", "requests/s"))):
        pts = sorted((p for p in result["points"] if p["kind"] == kind), key=lambda p: p["value"])
        if not pts:
            continue
        x = _arr(pts, "value")
        series = [Series("output throughput", x, _arr(pts, "output_throughput"), markers=True),
                  Series("requests completed", x, _arr(pts, "request_throughput"), axis=1, markers=True)]
        if any(p["goodput"] is not None for p in pts):
            series.append(Series("goodput (met the SLO)", x, _arr(pts, "goodput"), axis=1, markers=True))
        loop = "closed loop" if kind == "concurrency" else "open loop"
        out.append(Chart(f"Throughput and goodput against {axis.label} ({loop})", axis,
                         [THROUGHPUT, Axis("request rate", "requests/s")], series,
                         note=_knee_note(result, why=False) if kind == "concurrency" else "",
                         marks=_marks(result, "value", kind), point_names=[_load(p) for p in pts]))
    return out


def batch_chart(result: dict[str, Any]) -> Chart:
    pts = sorted((p for p in result["points"] if p["mean_batch"] is not None), key=lambda p: p["mean_batch"])
    return Chart("Throughput against mean decode batch", Axis("mean decode batch", "sequences"), [THROUGHPUT],
                 [Series("output throughput", _arr(pts, "mean_batch"), _arr(pts, "output_throughput"),
                         style="points", markers=True)], empty="no point has a decode batch",
                 point_names=[_load(p) for p in pts])


def step_chart(result: dict[str, Any]) -> list[Chart]:
    line, roof = result.get("step_line"), result.get("roofline")
    if not line:
        return []
    xs = np.linspace(1, max(line["batches"]), 50)
    series = [Series(f"measured ({line['source']})", xs, line["intercept_ms"] + line["slope_ms"] * xs)]
    if roof:
        slope = roof["roofline_slope_ms"] + (roof.get("exposed_compute_slope_ms") or 0.0)
        series.append(Series("roofline + floor + exposed math + overhead", xs,
                             roof["roofline_intercept_ms"] + (roof.get("kernel_floor_ms") or 0.0)
                             + (roof["engine_step_overhead_ms"] or 0.0) + slope * xs))
    return [Chart("Decode step time against batch", Axis("decode batch", "sequences"),
                  [Axis("step time", "ms", zero=False)], series,
                  note=f"Least-squares line from {line['source']}; the roofline's for the same model and GPU.")]


def _facts(result: dict[str, Any]) -> list[str]:
    knee, best, sat = result.get("knee"), result.get("goodput_max"), result.get("saturation") or {}
    line, roof = result.get("step_line"), result.get("roofline")
    facts = []
    if sat:
        facts.append(html.escape(("saturated: " if sat["reached"] else "") + sat["reason"]))
    if knee:
        facts.append(f"knee of the curve: point {knee['idx']} ({knee['kind']} {knee['value']:.3g}), "
                     f"{knee['output_throughput']:,.0f} tok/s, mean batch {knee['mean_batch'] or 0:.1f}")
    elif sat and not sat["reached"]:
        facts.append("no knee: not saturated (the points never saturated)")
    if best:
        facts.append(f"goodput maximum: point {best['idx']} ({best['kind']} {best['value']:.3g}), "
                     f"{best['goodput']:.2f} good req/s")
    if line and line["slope_ms"] > 0:
        facts.append(f"step line: {line['intercept_ms']:.3f} ms + {line['slope_ms']:.4f} ms x B "
                     f"(knee B = {line['intercept_ms'] / line['slope_ms']:.1f})")
    if roof:
        facts.append(f"roofline ({html.escape(roof['model'])} on {html.escape(roof['gpu'])}, context "
                     f"{roof['context']}): {roof['roofline_intercept_ms']:.3f} ms + "
                     f"{roof['roofline_slope_ms']:.4f} ms x B, knee B = {roof['roofline_knee_batch']:.1f}")
    return facts


def _table(result: dict[str, Any]) -> str:
    knee = (result.get("knee") or {}).get("idx")
    best = (result.get("goodput_max") or {}).get("idx")

    def row(p: dict[str, Any]) -> str:
        good = "" if p["goodput"] is None else f"{p['goodput']:.2f}"
        tag = " knee" if p["idx"] == knee else ""
        tag += " goodput max" if p["idx"] == best else ""
        return (f"<tr><td>{p['idx']}{tag}</td><td>{p['kind']} {p['value']:.3g}</td>"
                f"<td>{p['request_throughput']:.2f}</td><td>{p['output_throughput']:,.0f}</td>"
                f"<td>{p['p50_tpot_ms'] or 0:.2f}</td><td>{p['p50_e2el_ms'] or 0:.1f}</td>"
                f"<td>{p['mean_batch'] or 0:.1f}</td><td>{good}</td></tr>")

    return ("<table><tr><th>#</th><th>load</th><th>req/s</th><th>tok/s</th><th>p50 TPOT ms</th>"
            f"<th>p50 E2E ms</th><th>mean batch</th><th>goodput req/s</th></tr>"
            f"{''.join(row(p) for p in result['points'])}</table>")


def sweep_html(sweep_id: str, result: dict[str, Any]) -> str:
    charts = [*latency_charts(result), *load_charts(result), batch_chart(result), *step_chart(result)]
    facts = "".join(f"<li>{f}</li>" for f in _facts(result))
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>infbench sweep {html.escape(sweep_id)}</title>"
            "<style>body{font-family:sans-serif;margin:20px 24px;color:#222}h1{font-size:20px}"
            "table{border-collapse:collapse;font-size:12px;margin-bottom:16px}"
            "td,th{border:1px solid #ddd;padding:3px 8px;text-align:right}</style>"
            f"{page_head()}</head><body><h1>infbench sweep {html.escape(sweep_id)}</h1><ul>{facts}</ul>"
            f"{_table(result)}{render(charts)}</body></html>")
