"""`infbench sweep`: runs at rising load against one target, linked in the store, and what
they show: the throughput-latency curve, its knee, the goodput maximum under --slo, and the
step-time line beside `infbench plan roofline`."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import urllib.request
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from infbench.console import make_console, print_error
from infbench.loadgen.arrivals import Arrivals
from infbench.loadgen.execute import execute_run
from infbench.loadgen.lengths import LengthDist
from infbench.loadgen.local_engine import target_url
from infbench.loadgen.preflight import PreflightError, preflight
from infbench.loadgen.run_config import resolved_config
from infbench.loadgen.runner import RunSettings
from infbench.loadgen.slo import parse_slo
from infbench.loadgen.workloads.build import build_workload
from infbench.store import StoreError, open_store
from infbench.sweep.analysis import analyse
from infbench.sweep.html import sweep_html
from infbench.sweep.points import Point, fill_rates, parse_points
from infbench.sweep.saturation import LoadPoint, saturation
from infbench.sweep.store import add_point, create_sweep, new_sweep_id, save_result


def _engine_config(url: str) -> dict[str, Any] | None:
    """The reference engine's resolved settings (model, GPU, overhead); None elsewhere."""
    with contextlib.suppress(OSError, ValueError), urllib.request.urlopen(url + "/engine/config", timeout=5) as r:
        doc = json.loads(r.read())
        return {k: (v.get("value") if isinstance(v, dict) else v) for k, v in doc.items()}
    return None


def fail(message: str) -> typer.Exit:
    print_error(message)
    return typer.Exit(2)


def sweep(
    url: str | None = typer.Option(None, help="Target base URL; default: start the bundled engine."),
    model: str | None = typer.Option(None, help="Model name; default: the first from /v1/models."),
    endpoint: str = typer.Option("completions", help="completions | chat"),
    db: Path = typer.Option(Path("infbench.duckdb"), help="Store file (DuckDB)."),
    mode: str = typer.Option("auto", help="auto | concurrency | rate"),
    points: str | None = typer.Option(None, help="Listed loads, e.g. 1,2,4,8 (concurrency) or 2,4,8 (req/s)."),
    max_concurrency: int = typer.Option(1024, help="auto: the highest concurrency the ramp (1, 2, 4, ...) tries before it gives up on saturation; also caps open-loop points."),
    num_rates: int = typer.Option(6, help="auto: open-loop rates between the two ends."),
    workload: str = typer.Option("synthetic", help="Workload kind, as for `infbench run`."),
    input_tokens: str = typer.Option("uniform:256:1024", help="Input length (as for `infbench run`)."),
    output_tokens: str | None = typer.Option(None, help="Output length (as for `infbench run`)."),
    dataset: Path | None = typer.Option(None, help="sharegpt: ShareGPT-format JSON file."),
    duration: float = typer.Option(20.0, help="Seconds of load per point."),
    num_requests: int | None = typer.Option(None, help="Also stop a point after this many requests."),
    warmup: float = typer.Option(0.0, help="Seconds at the start of each point left out of its summary."),
    seed: int = typer.Option(0, help="Seed for lengths, prompts and arrivals."),
    slo: str | None = typer.Option(None, help="Goodput objectives, e.g. ttft=500ms,tpot=50ms."),
    engine_arg: list[str] = typer.Option([], help="Extra argument for the bundled engine (repeatable)."),
    html: Path | None = typer.Option(None, "--html", help="Write the sweep's plots to this HTML file."),
    json_out: bool = typer.Option(False, "--json", help="Print the analysis as JSON on stdout."),
) -> None:
    """Sweep load (concurrency or request rate) and find the knee and the goodput maximum."""
    console = make_console(stderr=True)
    try:
        listed = parse_points(mode, points)
        in_len = LengthDist.parse(input_tokens, "input_tokens")
        out_len = None if output_tokens is None else LengthDist.parse(output_tokens, "output_tokens")
        slo_ms = parse_slo(slo)
        if max_concurrency < 2:
            raise ValueError("max_concurrency: must be >= 2")
        if not 0 <= num_rates <= 50:
            raise ValueError("num_rates: must be in 0..50")
        if duration <= 0:
            raise ValueError("duration: must be > 0")
    except ValueError as exc:
        raise fail(str(exc)) from None

    sweep_id = new_sweep_id()
    try:
        with target_url(url, engine_arg, console) as base:
            engine = _engine_config(base)

            def run_point(idx: int, p: Point) -> dict[str, Any]:
                target = asyncio.run(preflight(base, endpoint, model, None))
                wl = build_workload(workload, input_len=in_len, output_len=out_len, target=target,
                                    prefix_groups=4, prefix_tokens=512, turns=3, dataset=dataset, trace=None,
                                    time_scale=1.0, trace_start=0.0, trace_end=None)
                arrivals = (Arrivals("closed", concurrency=int(p.value)) if p.kind == "concurrency"
                            else Arrivals("poisson", rate=p.value, concurrency=max_concurrency))
                settings = RunSettings(
                    url=target.url, endpoint=endpoint, model=target.model, arrivals=arrivals,
                    duration_s=duration, num_requests=num_requests, warmup_s=warmup, seed=seed,
                    ignore_eos=target.ignore_eos_supported, metrics_url=target.metrics_url,
                    steps_url=target.steps_url, steps_after=target.steps_after)
                settings.validate()
                config = resolved_config(settings, wl, target, slo_ms, bundled=url is None, engine_args=engine_arg)
                config["sweep"] = {"sweep_id": sweep_id, "point_idx": idx, "kind": p.kind, "value": p.value}
                console.print(f"[dim]sweep point {idx}: {p.label}…[/]")
                result = execute_run(settings, wl, db, config, slo_ms, None)
                con = open_store(db)
                try:
                    add_point(con, sweep_id, idx, result.run_id, p.kind, p.value)
                finally:
                    con.close()
                return result.summary

            con = open_store(db)
            try:
                create_sweep(con, sweep_id, mode, {"mode": mode, "points": points, "max_concurrency": max_concurrency,
                                                  "num_rates": num_rates, "duration_s": duration,
                                                  "num_requests": num_requests, "slo_ms": slo_ms,
                                                  "engine": engine, "engine_args": engine_arg})
            finally:
                con.close()
            if listed:
                for i, p in enumerate(listed):
                    run_point(i, p)
            else:
                ramp = ramp_until_saturated(run_point, max_concurrency, console)
                for i, p in enumerate(fill_rates(ramp[0]["request_throughput"],
                                                 max(r["request_throughput"] for r in ramp),
                                                 num_rates), start=len(ramp)):
                    run_point(i, p)
            con = open_store(db)
            try:
                pts = [tuple(r) for r in con.execute(
                    "SELECT point_idx, run_id, kind, value FROM sweep_points WHERE sweep_id = ? ORDER BY value, point_idx",
                    [sweep_id]).fetchall()]
                result = analyse(con, pts, slo_ms, engine)  # type: ignore[arg-type]
                result["sweep_id"] = sweep_id
                save_result(con, sweep_id, result)
            finally:
                con.close()
    except (PreflightError, StoreError, ValueError) as exc:
        raise fail(str(exc)) from None

    if html is not None:
        html.write_text(sweep_html(sweep_id, result), encoding="utf-8")
    if json_out:
        sys.stdout.write(json.dumps(result, indent=2, default=str) + "\n")
    else:
        _print(result)


def ramp_until_saturated(run_point: Any, max_concurrency: int, console: Any) -> list[dict[str, Any]]:
    """Closed loop at 1, 2, 4, ... until the points show saturation (throughput stopped
    rising, the SLO broke, errors started) or `max_concurrency` is reached."""
    summaries: list[dict[str, Any]] = []
    curve: list[LoadPoint] = []
    c = 1
    while True:
        s = run_point(len(summaries), Point("concurrency", c))
        summaries.append(s)
        share = s.get("goodput_fraction")
        curve.append(LoadPoint(len(curve), c, float(s.get("output_throughput") or 0.0),
                               s.get("median_e2el_ms"), share, int(s.get("failed") or 0)))
        sat = saturation(curve)
        if sat.reached:
            console.print(f"saturated: {sat.reason}", markup=False)
            return summaries
        if c >= max_concurrency:
            console.print(f"not saturated by --max-concurrency {max_concurrency}: {sat.reason}",
                          markup=False)
            return summaries
        c = min(2 * c, max_concurrency)


def _print(result: dict[str, Any]) -> None:
    console = make_console()
    t = Table(title=f"sweep {result['sweep_id']}", title_justify="left")
    for c in ("#", "load", "req/s", "out tok/s", "p50 TTFT", "p50 TPOT", "p50 E2E", "p99 E2E", "batch", "goodput"):
        t.add_column(c, justify="right")
    knee = (result.get("knee") or {}).get("idx")
    best = (result.get("goodput_max") or {}).get("idx")

    def ms(v: float | None) -> str:
        return "-" if v is None else f"{v:.1f}"

    for p in result["points"]:
        mark = (" knee" if p["idx"] == knee else "") + (" best" if p["idx"] == best else "")
        t.add_row(f"{p['idx']}{mark}", f"{p['kind'][:4]} {p['value']:.3g}", f"{p['request_throughput']:.2f}",
                  f"{p['output_throughput']:,.0f}", ms(p["p50_ttft_ms"]), ms(p["p50_tpot_ms"]),
                  ms(p["p50_e2el_ms"]), ms(p["p99_e2el_ms"]),
                  "-" if p["mean_batch"] is None else f"{p['mean_batch']:.1f}",
                  "-" if p["goodput"] is None else f"{p['goodput']:.2f}")
    console.print(t)
    sat = result.get("saturation") or {}
    if sat:
        console.print(("saturated: " if sat["reached"] else "") + sat["reason"]
                      + ("" if result.get("knee") else "; no knee named"))
    line, roof = result.get("step_line"), result.get("roofline")
    if line:
        console.print(f"step time ≈ {line['intercept_ms']:.3f} ms + {line['slope_ms']:.4f} ms × batch "
                      f"(from {line['source']}; knee B = {line['knee_batch']:.1f})")
    if roof:
        console.print(f"roofline ({roof['model']} on {roof['gpu']}, context {roof['context']}): "
                      f"{roof['roofline_intercept_ms']:.3f} ms + {roof['roofline_slope_ms']:.4f} ms × batch, "
                      f"knee B = {roof['roofline_knee_batch']:.1f}; engine adds "
                      f"{roof['engine_step_overhead_ms']} ms per step")
        if "measured_knee_batch_without_overhead" in roof:
            # None where the measured line does not rise with the batch (few, noisy points).
            knee = roof["measured_knee_batch_without_overhead"]
            console.print(f"measured knee without the engine's fixed overhead: B = "
                          f"{'-' if knee is None else f'{knee:.1f}'}; slope ratio "
                          f"{roof['slope_ratio']:.2f}")
