"""`infbench sweep`: runs at rising load against one target, linked in the store, and what
they show: the throughput-latency curve, its knee, the goodput maximum under --slo, and the
step-time line beside `infbench plan roofline`."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from infbench import command_options as opt
from infbench.console import make_console, print_error, print_warning
from infbench.loadgen.local_engine import target_url
from infbench.loadgen.preflight import PreflightError
from infbench.loadgen.slo import parse_slo
from infbench.pipeline.request import LoadSpec, TargetSpec, TelemetrySpec, WorkloadSpec
from infbench.pipeline.sweep import SweepRequest, run_sweep
from infbench.store import StoreError
from infbench.sweep.html import sweep_html
from infbench.sweep.loop import SweepPlan
from infbench.sweep.points import Point


def fail(message: str) -> typer.Exit:
    print_error(message)
    return typer.Exit(2)


def sweep(
    url: str | None = typer.Option(None, help="Target base URL; default: start the bundled engine."),
    api_key: str | None = opt.API_KEY,
    model: str | None = opt.MODEL,
    endpoint: str = opt.ENDPOINT,
    db: Path = opt.DB,
    mode: str = typer.Option("auto", help="auto | concurrency | rate"),
    points: str | None = typer.Option(None, help="Listed loads, e.g. 1,2,4,8 (concurrency) or 2,4,8 (req/s)."),
    max_concurrency: int = typer.Option(1024, help="auto: the highest concurrency the ramp (1, 2, 4, ...) tries before it gives up on saturation; also caps open-loop points."),
    num_rates: int = typer.Option(6, help="auto: open-loop rates between the two ends."),
    workload: str = opt.WORKLOAD,
    input_tokens: str = opt.INPUT_TOKENS,
    output_tokens: str | None = opt.OUTPUT_TOKENS,
    prefix_groups: int = opt.PREFIX_GROUPS,
    prefix_tokens: int = opt.PREFIX_TOKENS,
    turns: int = opt.TURNS,
    dataset: Path | None = opt.DATASET,
    trace: Path | None = opt.TRACE,
    time_scale: float = opt.TIME_SCALE,
    trace_start: float = opt.TRACE_START,
    trace_end: float | None = opt.TRACE_END,
    duration: float = typer.Option(20.0, help="Seconds of load per point."),
    num_requests: int | None = typer.Option(None, help="Also stop a point after this many requests."),
    warmup: float = typer.Option(0.0, help="Seconds at the start of each point left out of its summary."),
    cooldown: float = opt.COOLDOWN,
    timeout: float = opt.TIMEOUT,
    seed: int = opt.SEED,
    reuse_prompts: bool = opt.REUSE_PROMPTS,
    temperature: float = opt.TEMPERATURE,
    ignore_eos: bool = opt.IGNORE_EOS,
    slo: str | None = opt.SLO,
    metrics_url: str | None = opt.METRICS_URL,
    scrape_interval: float = opt.SCRAPE_INTERVAL,
    prometheus: str | None = opt.PROMETHEUS,
    prometheus_selector: str | None = opt.PROMETHEUS_SELECTOR,
    prometheus_token_env: str | None = opt.PROMETHEUS_TOKEN_ENV,
    prometheus_token_file: Path | None = opt.PROMETHEUS_TOKEN_FILE,
    prometheus_ca_file: Path | None = opt.PROMETHEUS_CA_FILE,
    prometheus_insecure: bool = opt.PROMETHEUS_INSECURE,
    prometheus_timeout: float = opt.PROMETHEUS_TIMEOUT,
    engine_arg: list[str] = opt.ENGINE_ARG,
    gpu_probe: bool = opt.GPU_PROBE,
    gpu_interval: float = opt.GPU_INTERVAL,
    watch: bool = opt.WATCH,
    watch_stall: float = opt.WATCH_STALL,
    watch_captures: int = opt.WATCH_CAPTURES,
    engine_pid: list[int] = opt.ENGINE_PID,
    html: Path | None = typer.Option(None, "--html", help="Write the sweep's plots to this HTML file."),
    json_out: bool = typer.Option(False, "--json", help="Print the analysis as JSON on stdout."),
) -> None:
    """Sweep load (concurrency or request rate) and find the knee and the goodput maximum."""
    console = make_console(stderr=True)
    try:
        plan = SweepPlan.parse(mode, points, max_concurrency, num_rates)
        wl = WorkloadSpec.parse(
            workload, input_tokens, output_tokens, prefix_groups=prefix_groups,
            prefix_tokens=prefix_tokens, turns=turns, dataset=dataset, trace=trace,
            time_scale=time_scale, trace_start=trace_start, trace_end=trace_end)
        slo_ms = parse_slo(slo)
        load = LoadSpec(duration, num_requests, warmup, cooldown, timeout, seed, reuse_prompts,
                        temperature, ignore_eos, slo_ms)
        telemetry = TelemetrySpec.from_options(
            scrape_interval=scrape_interval, gpu_probe=gpu_probe, gpu_interval=gpu_interval,
            watch=watch, watch_stall=watch_stall, watch_captures=watch_captures,
            engine_pid=engine_pid, prometheus=prometheus, prometheus_selector=prometheus_selector,
            prometheus_token_env=prometheus_token_env, prometheus_token_file=prometheus_token_file,
            prometheus_ca_file=prometheus_ca_file, prometheus_insecure=prometheus_insecure,
            prometheus_timeout=prometheus_timeout)
        target = TargetSpec.from_options(
            [url] if url else [], api_key=api_key, model=model, endpoint=endpoint,
            metrics_url=metrics_url, engine_args=engine_arg)
        request = SweepRequest(db, target, wl, load, telemetry, plan, describe={
            "mode": mode, "points": points, "max_concurrency": max_concurrency,
            "num_rates": num_rates, "duration_s": duration, "num_requests": num_requests,
            "slo_ms": slo_ms, "engine_args": engine_arg})
    except ValueError as exc:
        raise fail(str(exc)) from None

    def announce(idx: int, p: Point) -> None:
        console.print(f"[dim]sweep point {idx}: {p.label}…[/]")

    try:
        with target_url(url, engine_arg, console) as base:
            sweep_id, result = run_sweep(request, base, lambda line: print_warning(line, console),
                                         announce, lambda line: console.print(line, markup=False))
    except (PreflightError, StoreError, ValueError) as exc:
        raise fail(str(exc)) from None

    if html is not None:
        html.write_text(sweep_html(sweep_id, result), encoding="utf-8")
    if json_out:
        sys.stdout.write(json.dumps(result, indent=2, default=str) + "\n")
    else:
        _print(result)


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
