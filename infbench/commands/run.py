"""`infbench run`: load-test an OpenAI-compatible endpoint (the bundled engine by default)."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import typer

from infbench import command_options as opt
from infbench.console import make_console, print_error, print_warning
from infbench.loadgen.arrivals import KINDS as ARRIVAL_KINDS
from infbench.loadgen.local_engine import target_url
from infbench.loadgen.outcome import EXIT_CODES_HELP, exit_code, validate_max_error_rate
from infbench.loadgen.preflight import PreflightError
from infbench.loadgen.slo import parse_slo
from infbench.loadgen.workers.scale import REFUSED as WORKERS_REFUSED
from infbench.loadgen.workers.scale import Scale
from infbench.pipeline.record import prepare_run, record_run
from infbench.pipeline.request import (
    DEFAULT_DURATION_S,
    LoadSpec,
    RunRequest,
    TargetSpec,
    TelemetrySpec,
    WorkloadSpec,
    arrivals_from_options,
    default_duration,
)
from infbench.report.live import live_progress
from infbench.report.terminal import print_summary
from infbench.store import StoreError


def fail(message: str, code: int = 2) -> typer.Exit:
    print_error(message)
    return typer.Exit(code)


def run(
    url: list[str] = typer.Option([], help="Base URL of an OpenAI-compatible server; default: start the bundled engine. Repeat for a fleet (one workload over several replicas; NAME=URL names one)."),
    targets: Path | None = typer.Option(None, help="Fleet: a file of replicas, one a line: \\[NAME=]URL \\[dcgm=METRICS_URL] (a dcgm-exporter endpoint scraped beside its /metrics)."),
    route: str | None = typer.Option(None, help="Fleet routing: round-robin (default) | least-outstanding | share:NAME=W,... (or share:W,W,... in replica order)."),
    api_key: str | None = opt.API_KEY,
    model: str | None = opt.MODEL,
    endpoint: str = opt.ENDPOINT,
    db: Path = opt.DB,
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
    arrival: str | None = typer.Option(None, help=" | ".join(ARRIVAL_KINDS) + " (default: poisson; trace for --workload trace)"),
    rate: float = typer.Option(4.0, help="Open loop: requests (sessions) per second."),
    burstiness: float = typer.Option(1.0, help="gamma: shape; 1 = Poisson, < 1 burstier."),
    concurrency: int | None = typer.Option(None, help="Closed loop: slots (default 8). Open loop: cap on in-flight (default none)."),
    duration: float | None = typer.Option(None, help=f"Stop starting requests after this many seconds (default {DEFAULT_DURATION_S:.0f} unless --num-requests); conversations begun run all their turns."),
    num_requests: int | None = typer.Option(None, help="Stop after this many requests (multiturn: whole conversations, so up to --turns - 1 more)."),
    warmup: float = typer.Option(0.0, help="Seconds at the start excluded from the summary (kept in the store)."),
    cooldown: float = opt.COOLDOWN,
    timeout: float = opt.TIMEOUT,
    max_error_rate: float = typer.Option(0.0, help="Exit 0 even when up to this fraction of requests failed (the run is still stored as completed_with_errors)."),
    seed: int = opt.SEED,
    reuse_prompts: bool = opt.REUSE_PROMPTS,
    temperature: float = opt.TEMPERATURE,
    ignore_eos: bool = opt.IGNORE_EOS,
    slo: str | None = opt.SLO,
    metrics_url: str | None = opt.METRICS_URL,
    scrape_interval: float = opt.SCRAPE_INTERVAL,
    metrics_port: str | None = typer.Option(None, help="Serve the live run in Prometheus text format at PORT (on 127.0.0.1) or HOST:PORT /metrics: requests, errors by class, TTFT/ITL/e2e histograms, client health (dashboards/infbench-run.json), for watching a soak."),
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
    workers: int = typer.Option(1, help="Worker processes on this host, each with its own event loop and connections: the schedule is split by session (a conversation stays on one), --concurrency and --rate keep their totals, one writer stores everything. With --ray: workers per node."),
    ray: str | None = typer.Option(None, help=f"Run the workers as Ray actors on the cluster at this address (HOST:PORT of its head, as `ray start --head` printed), --workers on each alive node; needs infbench[dist] here and on the nodes. Refused (exit 2): {WORKERS_REFUSED}."),
    ray_cpus: float = typer.Option(1.0, help="--ray: CPUs each worker actor asks for."),
    watch: bool = opt.WATCH,
    watch_stall: float = opt.WATCH_STALL,
    watch_captures: int = opt.WATCH_CAPTURES,
    engine_pid: list[int] = opt.ENGINE_PID,
    json_out: bool = typer.Option(False, "--json", help="Print the summary as JSON (vLLM bench key names) on stdout."),
    quiet: bool = typer.Option(False, help="No progress (by default a live line on a terminal, a line every 5 s on stderr when piped)."),
) -> None:
    """Load-test a target and record every request and chunk in the store."""
    console = make_console(stderr=True)
    try:
        validate_max_error_rate(max_error_rate)
        wl = WorkloadSpec.parse(
            workload, input_tokens, output_tokens, prefix_groups=prefix_groups,
            prefix_tokens=prefix_tokens, turns=turns, dataset=dataset, trace=trace,
            time_scale=time_scale, trace_start=trace_start, trace_end=trace_end)
        arrivals = arrivals_from_options(arrival, workload, rate=rate, burstiness=burstiness,
                                         concurrency=concurrency, time_scale=time_scale)
        load = LoadSpec(default_duration(duration, num_requests, arrivals), num_requests, warmup,
                        cooldown, timeout, seed, reuse_prompts, temperature, ignore_eos,
                        parse_slo(slo))
        telemetry = TelemetrySpec.from_options(
            scrape_interval=scrape_interval, gpu_probe=gpu_probe, gpu_interval=gpu_interval,
            watch=watch, watch_stall=watch_stall, watch_captures=watch_captures,
            engine_pid=engine_pid, prometheus=prometheus, prometheus_selector=prometheus_selector,
            prometheus_token_env=prometheus_token_env, prometheus_token_file=prometheus_token_file,
            prometheus_ca_file=prometheus_ca_file, prometheus_insecure=prometheus_insecure,
            prometheus_timeout=prometheus_timeout, metrics_port=metrics_port)
        target = TargetSpec.from_options(
            url, targets=targets, route=route, api_key=api_key, model=model, endpoint=endpoint,
            metrics_url=metrics_url, engine_args=engine_arg)
        request = RunRequest(db, target, wl, arrivals, load, telemetry,
                             Scale(workers=workers, ray_address=ray, ray_cpus=ray_cpus))
        if ray is not None:  # last: it reaches the cluster, after every local check passed
            from infbench.loadgen.workers.ray_backend import connect as ray_connect
            nodes = ray_connect(ray)
            request = replace(request, scale=Scale(
                workers=workers, ray_address=ray, ray_nodes=tuple(n["NodeID"] for n in nodes),
                ray_cpus=ray_cpus))
    except ValueError as exc:
        raise fail(str(exc)) from None

    def warn(line: str) -> None:
        print_warning(line, console)

    try:
        with target_url(target.first_url, engine_arg, console) as base:
            try:
                prepared = prepare_run(request, base, warn)
            except (PreflightError, ValueError) as exc:
                raise fail(str(exc)) from None
            progress = None if quiet else (lambda st, s: live_progress(st, s, console))
            result = record_run(prepared, warn, progress)
    except StoreError as exc:
        raise fail(str(exc)) from None
    except PreflightError as exc:
        raise fail(str(exc)) from None

    summary = result.summary
    if json_out:
        sys.stdout.write(json.dumps(summary, indent=2, default=str) + "\n")
    else:
        print_summary(make_console(), summary, {"run_id": result.run_id, "status": result.status.status,
                                           "model": prepared.settings.model,
                                           "target_url": prepared.settings.url})
        make_console().print(f"[dim]stored in {db} as run {result.run_id}[/]")
    code = exit_code(result.status, summary["completed"], max_error_rate=max_error_rate,
                     signalled=result.signal_name is not None)
    if code:
        raise typer.Exit(code)


run.__doc__ = f"{run.__doc__}\n\n{EXIT_CODES_HELP}"
