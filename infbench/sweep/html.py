"""The sweep's page: throughput-latency curve, throughput against load, and the step-time
line beside the roofline's (inline SVG, no network)."""

from __future__ import annotations

import html
from typing import Any

import numpy as np

from infbench.report import svg


def sweep_html(sweep_id: str, result: dict[str, Any]) -> str:
    pts = result["points"]
    thr = np.array([p["output_throughput"] for p in pts])
    plots = []
    for key, name in (("p50_tpot_ms", "p50 TPOT"), ("p50_e2el_ms", "p50 E2E"), ("p99_e2el_ms", "p99 E2E")):
        ys = np.array([p[key] if p[key] is not None else np.nan for p in pts], float)
        order = np.argsort(thr)
        plots.append(svg.lines([(name, thr[order], ys[order])], f"{name} against throughput",
                               "output tokens/s", "ms"))
    batch = np.array([p["mean_batch"] or np.nan for p in pts], float)
    order = np.argsort(batch)
    plots.append(svg.lines([("output tokens/s", batch[order], thr[order])],
                           "Throughput against mean decode batch", "decode sequences per step", "tokens/s"))
    line, roof = result.get("step_line"), result.get("roofline")
    if line:
        xs = np.linspace(1, max(line["batches"]), 50)
        series = [("measured line", xs, line["intercept_ms"] + line["slope_ms"] * xs)]
        if roof:
            series.append(("roofline + engine overhead", xs, roof["roofline_intercept_ms"]
                           + (roof["engine_step_overhead_ms"] or 0.0) + roof["roofline_slope_ms"] * xs))
        plots.append(svg.lines(series, f"Step time against batch (from {line['source']})", "batch", "ms"))
    knee, best = result.get("knee"), result.get("goodput_max")
    facts = []
    sat = result.get("saturation") or {}
    if sat:
        facts.append(html.escape(("saturated: " if sat["reached"] else "") + sat["reason"]))
    if knee:
        facts.append(f"knee of the curve: point {knee['idx']} ({knee['kind']} {knee['value']:.3g}), "
                     f"{knee['output_throughput']:,.0f} tok/s, mean batch {knee['mean_batch'] or 0:.1f}")
    elif sat and not sat["reached"]:
        facts.append("no knee: the points never saturated")
    if best:
        facts.append(f"goodput maximum: point {best['idx']} ({best['kind']} {best['value']:.3g}), "
                     f"{best['goodput']:.2f} good req/s")
    if line:
        facts.append(f"step line: {line['intercept_ms']:.3f} ms + {line['slope_ms']:.4f} ms x B "
                     f"(knee B = {line['intercept_ms'] / line['slope_ms']:.1f})" if line["slope_ms"] > 0 else "")
    if roof:
        facts.append(f"roofline ({html.escape(roof['model'])} on {html.escape(roof['gpu'])}, context "
                     f"{roof['context']}): {roof['roofline_intercept_ms']:.3f} ms + "
                     f"{roof['roofline_slope_ms']:.4f} ms x B, knee B = {roof['roofline_knee_batch']:.1f}")
    def row(p: dict[str, Any]) -> str:
        good = "" if p["goodput"] is None else f"{p['goodput']:.2f}"
        return (f"<tr><td>{p['idx']}</td><td>{p['kind']} {p['value']:.3g}</td>"
                f"<td>{p['request_throughput']:.2f}</td><td>{p['output_throughput']:,.0f}</td>"
                f"<td>{p['p50_tpot_ms'] or 0:.2f}</td><td>{p['p50_e2el_ms'] or 0:.1f}</td>"
                f"<td>{p['mean_batch'] or 0:.1f}</td><td>{good}</td></tr>")

    rows = "".join(row(p) for p in pts)
    table = ("<table><tr><th>#</th><th>load</th><th>req/s</th><th>tok/s</th><th>p50 TPOT ms</th>"
             f"<th>p50 E2E ms</th><th>mean batch</th><th>goodput</th></tr>{rows}</table>")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>infbench sweep {html.escape(sweep_id)}</title>"
            "<style>body{font-family:sans-serif;max-width:1500px;margin:20px auto}table{border-collapse:collapse;"
            "font-size:12px}td,th{border:1px solid #ddd;padding:3px 8px;text-align:right}"
            ".grid{display:flex;flex-wrap:wrap;gap:12px}</style></head><body>"
            f"<h1>infbench sweep {html.escape(sweep_id)}</h1><ul>{''.join(f'<li>{f}</li>' for f in facts if f)}</ul>"
            f"{table}<div class='grid'>{''.join(f'<div>{p}</div>' for p in plots)}</div></body></html>")
