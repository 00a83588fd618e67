"""`infbench run`: load-test an OpenAI-compatible endpoint (the bundled engine by default)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import duckdb
import typer

from infbench.config.model import CaptureError
from infbench.config.run_link import link_run_config
from infbench.console import make_console, print_error, print_warning
from infbench.loadgen.arrivals import KINDS as ARRIVAL_KINDS
from infbench.loadgen.arrivals import Arrivals
from infbench.loadgen.bodies import ENDPOINTS
from infbench.loadgen.execute import execute_run
from infbench.loadgen.exposition import bind_socket, parse_bind
from infbench.loadgen.fleet import Replica, RoutePolicy, parse_replicas, parse_route, read_targets
from infbench.loadgen.fleet_setup import preflight_fleet
from infbench.loadgen.lengths import LengthDist
from infbench.loadgen.local_engine import target_url
from infbench.loadgen.outcome import EXIT_CODES_HELP, exit_code, validate_max_error_rate
from infbench.loadgen.preflight import PreflightError, preflight
from infbench.loadgen.run_config import resolved_config
from infbench.loadgen.runner import RunSettings
from infbench.loadgen.seeds import Streams, new_salt
from infbench.loadgen.slo import parse_slo
from infbench.loadgen.watch import Watch, WatchSettings
from infbench.loadgen.workers.scale import REFUSED as WORKERS_REFUSED
from infbench.loadgen.workers.scale import Scale
from infbench.loadgen.workloads import (
    WORKLOADS,
)
from infbench.loadgen.workloads.build import DEFAULT_OUTPUT_TOKENS, build_workload
from infbench.report.live import live_progress
from infbench.report.terminal import print_summary
from infbench.store import StoreError, open_store
from probes.gpu.prometheus import convert_pulled
from probes.gpu.run_metrics import gpu_samples_from_run
from probes.gpu.run_probe import DEFAULT_INTERVAL_S as GPU_INTERVAL_S
from probes.gpu.run_probe import start_if_asked, store_after_run
from probes.prometheus.client import connect
from probes.prometheus.pull import pull_into_store
from probes.watch.capture import IncidentCapturer, WatchTarget
from probes.watch.store import store_watch_after_run

DEFAULT_DURATION_S = 30.0
# Longest wait after the run for Prometheus to scrape the target once more (its default
# interval is 15 s); the wait ends at the first scrape after the run's end.
PROMETHEUS_WAIT_S = 35.0


def fail(message: str, code: int = 2) -> typer.Exit:
    print_error(message)
    return typer.Exit(code)


def run(
    url: list[str] = typer.Option([], help="Base URL of an OpenAI-compatible server; default: start the bundled engine. Repeat for a fleet (one workload over several replicas; NAME=URL names one)."),
    targets: Path | None = typer.Option(None, help="Fleet: a file of replicas, one a line: \\[NAME=]URL \\[dcgm=METRICS_URL] (a dcgm-exporter endpoint scraped beside its /metrics)."),
    route: str | None = typer.Option(None, help="Fleet routing: round-robin (default) | least-outstanding | share:NAME=W,... (or share:W,W,... in replica order)."),
    api_key: str | None = typer.Option(None, envvar="OPENAI_API_KEY", show_envvar=True, help="Bearer key (never stored)."),
    model: str | None = typer.Option(None, help="Model name; default: the first from /v1/models."),
    endpoint: str = typer.Option("completions", help="completions | chat"),
    db: Path = typer.Option(Path("infbench.duckdb"), help="Store file (DuckDB)."),
    workload: str = typer.Option("synthetic", help=" | ".join(WORKLOADS)),
    input_tokens: str = typer.Option("uniform:256:1024", help="Input length as the server counts the prompt (BOS, chat template included): 512, uniform:LOW:HIGH, normal:MEAN:STD, lognormal:MEDIAN:SIGMA (multiturn: each user message's own text, the template on top; prefix: the suffix)."),
    output_tokens: str | None = typer.Option(None, help=f"Output length (max_tokens), same forms (default {DEFAULT_OUTPUT_TOKENS}; sharegpt: each reply's length unless given)."),
    prefix_groups: int = typer.Option(4, help="prefix: number of shared-prefix groups."),
    prefix_tokens: int = typer.Option(512, help="prefix: tokens in each group's shared prefix."),
    turns: int = typer.Option(3, help="multiturn: turns per conversation."),
    dataset: Path | None = typer.Option(None, help="sharegpt: ShareGPT-format JSON file."),
    trace: Path | None = typer.Option(None, help="trace: CSV or JSONL of arrivals with lengths (Azure, Mooncake, generic)."),
    time_scale: float = typer.Option(1.0, help="trace: multiply inter-arrival gaps (0.5 = twice as fast)."),
    trace_start: float = typer.Option(0.0, help="trace: skip rows before this many seconds into the trace."),
    trace_end: float | None = typer.Option(None, help="trace: stop at this many seconds into the trace."),
    arrival: str | None = typer.Option(None, help=" | ".join(ARRIVAL_KINDS) + " (default: poisson; trace for --workload trace)"),
    rate: float = typer.Option(4.0, help="Open loop: requests (sessions) per second."),
    burstiness: float = typer.Option(1.0, help="gamma: shape; 1 = Poisson, < 1 burstier."),
    concurrency: int | None = typer.Option(None, help="Closed loop: slots (default 8). Open loop: cap on in-flight (default none)."),
    duration: float | None = typer.Option(None, help=f"Stop starting requests after this many seconds (default {DEFAULT_DURATION_S:.0f} unless --num-requests); conversations begun run all their turns."),
    num_requests: int | None = typer.Option(None, help="Stop after this many requests (multiturn: whole conversations, so up to --turns - 1 more)."),
    warmup: float = typer.Option(0.0, help="Seconds at the start excluded from the summary (kept in the store)."),
    cooldown: float = typer.Option(0.0, help="Seconds before sending stopped excluded from the summary."),
    timeout: float = typer.Option(300.0, help="Per-request timeout (s)."),
    max_error_rate: float = typer.Option(0.0, help="Exit 0 even when up to this fraction of requests failed (the run is still stored as completed_with_errors)."),
    seed: int = typer.Option(0, help="Seed for the arrival schedule, lengths and prompt text: the same seed sends the same schedule and lengths to any target."),
    reuse_prompts: bool = typer.Option(False, "--reuse-prompts", help="Send the same prompt text as every run with this --seed, to measure prefix-cache reuse. Default: text salted per run (same lengths), so no run is served from an earlier run's cache."),
    temperature: float = typer.Option(0.0, help="Sampling temperature sent with each request."),
    ignore_eos: bool = typer.Option(True, help="Ask the server to ignore EOS (when it supports it)."),
    slo: str | None = typer.Option(None, help="Goodput objectives, e.g. ttft=500ms,tpot=50ms,e2el=5s."),
    metrics_url: str | None = typer.Option(None, help="Prometheus endpoint to scrape (default: URL/metrics if present)."),
    scrape_interval: float = typer.Option(1.0, help="Seconds between /metrics and step-log scrapes."),
    metrics_port: str | None = typer.Option(None, help="Serve the live run in Prometheus text format at PORT (on 127.0.0.1) or HOST:PORT /metrics: requests, errors by class, TTFT/ITL/e2e histograms, client health (dashboards/infbench-run.json), for watching a soak."),
    prometheus: str | None = typer.Option(None, help="After the run, pull the target's series for its window from this Prometheus (vLLM, SGLang, dcgm-exporter, node; histograms as buckets) into the store; a Prometheus that is down or fails only adds a warning to the summary."),
    prometheus_selector: str | None = typer.Option(None, help="Label matchers choosing the target's series in --prometheus, e.g. 'pod=~\"vllm-.*\"' (default: the scrape target at the run's URL)."),
    prometheus_token_env: str | None = typer.Option(None, help="Environment variable holding --prometheus's bearer token (never stored or printed)."),
    prometheus_token_file: Path | None = typer.Option(None, help="File holding --prometheus's bearer token (never stored or printed)."),
    prometheus_ca_file: Path | None = typer.Option(None, help="CA bundle to verify an https --prometheus with."),
    prometheus_insecure: bool = typer.Option(False, "--prometheus-insecure", help="Do not verify --prometheus's TLS certificate."),
    prometheus_timeout: float = typer.Option(10.0, help="Seconds to wait for each --prometheus answer."),
    engine_arg: list[str] = typer.Option([], help="Extra argument for the bundled engine (repeatable)."),
    gpu_probe: bool = typer.Option(False, "--gpu-probe", help="Sample this host's GPUs through NVML during the run (clocks, throttle reasons, power, temperature, PCIe, ECC, XID) into gpu_samples; needs nvidia-ml-py (infbench[gpu]). Without it or a GPU: one line, and the run goes on."),
    gpu_interval: float = typer.Option(GPU_INTERVAL_S, help="Seconds between --gpu-probe samples."),
    workers: int = typer.Option(1, help="Worker processes on this host, each with its own event loop and connections: the schedule is split by session (a conversation stays on one), --concurrency and --rate keep their totals, one writer stores everything. With --ray: workers per node."),
    ray: str | None = typer.Option(None, help=f"Run the workers as Ray actors on the cluster at this address (HOST:PORT of its head, as `ray start --head` printed), --workers on each alive node; needs infbench[dist] here and on the nodes. Refused (exit 2): {WORKERS_REFUSED}."),
    ray_cpus: float = typer.Option(1.0, help="--ray: CPUs each worker actor asks for."),
    watch: bool = typer.Option(True, "--watch/--no-watch", help="Watch the run live and capture evidence while an incident lasts: an engine-wide stop of tokens (--watch-stall), an error burst, a replica departing from its peers at equal load. Each capture (at most --watch-captures, 10 s apart) takes every target's /metrics, the engine's stacks (py-spy; the ranks at /debug/ranks, else --engine-pid) and Flight Recorder dumps where the engine has them, stored with the run for `infbench diagnose RUN`."),
    watch_stall: float = typer.Option(1.0, help="Live watch: seconds without a byte on every open stream of a target that count as an engine-wide stop."),
    watch_captures: int = typer.Option(3, help="Live watch: most captures taken in one run (0: note the incidents, capture nothing)."),
    engine_pid: list[int] = typer.Option([], help="Live watch: a process of the engine on this host to read stacks from with py-spy when an incident is seen (repeat: vLLM's API server and its EngineCore). The bundled engine lists its own at /debug/ranks."),
    json_out: bool = typer.Option(False, "--json", help="Print the summary as JSON (vLLM bench key names) on stdout."),
    quiet: bool = typer.Option(False, help="No progress (by default a live line on a terminal, a line every 5 s on stderr when piped)."),
) -> None:
    """Load-test a target and record every request and chunk in the store."""
    console = make_console(stderr=True)
    try:
        if endpoint not in ENDPOINTS:
            raise ValueError(f"endpoint: {endpoint!r} is not one of {', '.join(ENDPOINTS)}")
        validate_max_error_rate(max_error_rate)
        Streams(seed)  # a bad seed fails here, before an engine is started
        in_len = LengthDist.parse(input_tokens, "input_tokens")
        out_len = None if output_tokens is None else LengthDist.parse(output_tokens, "output_tokens")
        slo_ms = parse_slo(slo)
        kind = arrival or ("trace" if workload == "trace" else "poisson")
        if kind == "trace" and workload != "trace":
            raise ValueError("arrival: trace timestamps need --workload trace")
        conc = concurrency if concurrency is not None else (8 if kind == "closed" else 0)
        arrivals = Arrivals(kind, rate=rate, burstiness=burstiness, concurrency=conc, time_scale=time_scale)
        arrivals.validate()
        if duration is None and num_requests is None and kind != "trace":
            duration = DEFAULT_DURATION_S
        if db.exists() and db.is_dir():
            raise ValueError(f"db: {db} is a directory")
        if not gpu_interval > 0:
            raise ValueError(f"gpu-interval: must be > 0 seconds, not {gpu_interval}")
        watch_settings = WatchSettings(stall_s=watch_stall)
        watch_settings.validate()
        if watch_captures < 0:
            raise ValueError(f"watch-captures: must be >= 0, not {watch_captures}")
        if any(p <= 0 for p in engine_pid):
            raise ValueError(f"engine-pid: {min(engine_pid)} is not a process id")
        metrics_bind = None if metrics_port is None else parse_bind(metrics_port)
        if metrics_bind is not None and metrics_bind[1] != 0:
            try:  # refused now, before anything is sent, rather than mid-run
                bind_socket(*metrics_bind).close()
            except OSError as exc:
                raise ValueError(f"metrics-port: cannot listen on {metrics_port}: "
                                 f"{exc.strerror or exc}") from None
        prom = None if prometheus is None else connect(
            prometheus, token_env=prometheus_token_env, token_file=prometheus_token_file,
            ca_file=prometheus_ca_file, insecure=prometheus_insecure, timeout_s=prometheus_timeout)
        replicas, policy = _fleet(url, targets, route, metrics_url)
        scale = Scale(workers=workers, ray_address=ray, ray_cpus=ray_cpus)
        if scale.active and (replicas or metrics_bind is not None):
            raise ValueError(f"workers: {WORKERS_REFUSED}")
        if ray is not None:
            from infbench.loadgen.workers.ray_backend import connect as ray_connect
            nodes = ray_connect(ray)
            scale = Scale(workers=workers, ray_address=ray, ray_nodes=tuple(n["NodeID"] for n in nodes),
                          ray_cpus=ray_cpus)
    except ValueError as exc:
        raise fail(str(exc)) from None

    try:
        single = url[0] if url and not replicas else None
        with target_url(replicas[0].url if replicas else single, engine_arg, console) as base:
            try:
                if replicas:
                    target, fleet_warnings = asyncio.run(preflight_fleet(replicas, endpoint, model, api_key))
                    for warning in fleet_warnings:
                        print_warning(warning, console)
                else:
                    target = asyncio.run(preflight(base, endpoint, model, api_key, metrics_url))
                wl = build_workload(
                    workload, input_len=in_len, output_len=out_len, target=target,
                    prefix_groups=prefix_groups, prefix_tokens=prefix_tokens, turns=turns,
                    dataset=dataset, trace=trace, time_scale=time_scale, trace_start=trace_start,
                    trace_end=trace_end)
                settings = RunSettings(
                    url=target.url, endpoint=endpoint, model=target.model, arrivals=arrivals,
                    api_key=api_key, duration_s=duration, num_requests=num_requests, warmup_s=warmup,
                    cooldown_s=cooldown, request_timeout_s=timeout, seed=seed,
                    prompt_salt=None if reuse_prompts else new_salt(),
                    ignore_eos=ignore_eos and target.ignore_eos_supported, temperature=temperature,
                    metrics_url=target.metrics_url, steps_url=target.steps_url,
                    steps_after=target.steps_after, scrape_interval_s=scrape_interval,
                    replicas=replicas, route=policy, metrics_bind=metrics_bind)
                settings.validate()
                scale.validate(settings, wl)
            except (PreflightError, ValueError) as exc:
                raise fail(str(exc)) from None
            bundled = not url and not replicas
            config = resolved_config(settings, wl, target, slo_ms, bundled=bundled, engine_args=engine_arg)
            for warning in config["workload_warnings"]:  # before the run, not only after it
                print_warning(warning, console)
            progress = None if quiet else (lambda st, s: live_progress(st, s, console))
            gpu = start_if_asked(gpu_probe, gpu_interval, settings.url,
                                 lambda line: print_warning(line, console))
            capturer = live_capturer(settings, engine_pid, watch_captures, gpu) if (
                watch and not scale.active) else None
            try:
                result = execute_run(settings, wl, db, config, slo_ms, progress, scale=scale,
                                     watch=Watch(watch_settings, capturer.submit) if capturer else None)
            finally:
                records = capturer.close() if capturer is not None else []
                if gpu is not None:
                    gpu.stop()
    except StoreError as exc:
        raise fail(str(exc)) from None
    except PreflightError as exc:
        raise fail(str(exc)) from None

    # The target's configuration (reference engine /engine/config, vLLM cache_config_info),
    # stored linked to the run so `infbench config diff` can compare runs' engines.
    try:
        link_run_config(db, result.run_id)
    except (StoreError, CaptureError) as exc:
        print_warning(f"the target's configuration was not captured: {exc}", console)
    # GPU telemetry the targets exported in dcgm-exporter names (the reference engine's
    # simulated device, a replica's dcgm-exporter): per replica into gpu_samples.
    try:
        con = open_store(db)
        try:
            gpu_samples_from_run(con, result.run_id)
        finally:
            con.close()
    except (StoreError, ValueError, duckdb.Error) as exc:
        print_warning(f"GPU telemetry scraped from the targets was not stored: {exc}", console)
    if prom is not None:  # never changes the run's status or exit code: a warning at most
        try:
            report = pull_into_store(db, result.run_id, prom, selector=prometheus_selector,
                                     wait_s=PROMETHEUS_WAIT_S)
            result.summary["prometheus"] = report.as_dict()
            if report.warning:
                result.summary["warnings"].append(report.warning)
        except StoreError as exc:
            print_warning(f"Prometheus series were not stored: {exc}", console)
    try:  # NVML samples (--gpu-probe) and the dcgm series a --prometheus pull brought
        result.summary["gpu_probe"] = store_after_run(gpu, db, result.run_id)
        if prom is not None and result.summary.get("prometheus", {}).get("families", {}).get("dcgm"):
            result.summary["prometheus"]["gpu_samples"] = convert_pulled(db, result.run_id)
    except (StoreError, ValueError, duckdb.Error) as exc:
        print_warning(f"GPU telemetry was not stored: {exc}", console)
    if records:  # what the live watch saw and captured, on the run's time axis
        try:
            result.summary["watch"] = store_watch_after_run(db, result.run_id, records)
        except (StoreError, duckdb.Error) as exc:
            print_warning(f"the live watch's captures were not stored: {exc}", console)
    elif watch and scale.active:
        result.summary["warnings"].append("the live watch runs in one process: with --workers "
                                          "or --ray it is off")
    summary = result.summary
    if json_out:
        sys.stdout.write(json.dumps(summary, indent=2, default=str) + "\n")
    else:
        print_summary(make_console(), summary, {"run_id": result.run_id, "status": result.status.status,
                                           "model": settings.model, "target_url": settings.url})
        make_console().print(f"[dim]stored in {db} as run {result.run_id}[/]")
    code = exit_code(result.status, summary["completed"], max_error_rate=max_error_rate,
                     signalled=result.signal_name is not None)
    if code:
        raise typer.Exit(code)


def live_capturer(settings: RunSettings, pids: list[int], max_captures: int,
                  gpu: object | None) -> IncidentCapturer:
    """What the live watch captures from: every target (its URL and /metrics), the engine's
    pids, the GPU probe's sampler when one runs."""
    targets = ([WatchTarget(r.name, r.url, r.metrics_url) for r in settings.replicas]
               if settings.replicas else [WatchTarget(None, settings.url, settings.metrics_url)])
    sampler = getattr(gpu, "sampler", None)
    return IncidentCapturer(targets, list(pids), api_key=settings.api_key,
                            gpu_sample=sampler.sample if sampler is not None else None,
                            max_captures=max_captures)


def _fleet(urls: list[str], targets: Path | None, route: str | None,
           metrics_url: str | None) -> tuple[list[Replica], RoutePolicy]:
    """The replicas of a fleet run (none for one target) and its routing."""
    if targets is not None and urls:
        raise ValueError("targets: give the replicas with --url or in --targets, not both")
    replicas = read_targets(targets) if targets is not None else (
        parse_replicas(urls) if len(urls) > 1 else [])
    if not replicas:
        if route is not None:
            raise ValueError("route: routing needs a fleet (--url A --url B ..., or --targets FILE)")
        return [], RoutePolicy("round-robin")
    if metrics_url is not None:
        raise ValueError("metrics-url: a fleet scrapes each replica's URL/metrics; give a "
                         "replica's dcgm-exporter endpoint in --targets (dcgm=URL)")
    return replicas, parse_route(route or "round-robin", replicas)


run.__doc__ = f"{run.__doc__}\n\n{EXIT_CODES_HELP}"
