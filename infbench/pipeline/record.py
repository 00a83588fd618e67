"""One measured run end to end: preflight, workload, settings and the stored configuration
(`prepare_run`), then the run with the GPU probe and the live watch beside it and every step
after it (`record_run`). `run_and_record` is both, for callers that refuse nothing on their own.

Two halves because `infbench run` answers them differently: a refusal before anything is
stored is a usage error (exit 2), a failure during the run is not.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from infbench.loadgen.fleet.preflight import preflight_fleet
from infbench.loadgen.preflight import Target, preflight
from infbench.loadgen.run.config import resolved_config
from infbench.loadgen.run.execute import ProgressHook, RunResult, execute_run
from infbench.loadgen.run.runner import RunSettings
from infbench.loadgen.seeds import new_salt
from infbench.loadgen.telemetry.watch import Watch
from infbench.loadgen.workloads import Workload
from infbench.pipeline.post_run import after_run
from infbench.pipeline.request import RunRequest, WatchSpec
from probes.gpu.run_probe import start_if_asked
from probes.watch.capture import IncidentCapturer, WatchTarget

Warn = Callable[[str], None]


@dataclass
class PreparedRun:
    """A run that passed preflight and every check, with the configuration it will be
    stored with; nothing is stored yet."""

    request: RunRequest
    target: Target
    workload: Workload
    settings: RunSettings
    config: dict[str, Any]


def prepare_run(request: RunRequest, base: str, warn: Warn) -> PreparedRun:
    """Preflight the target at `base` (or each replica), build the workload and the run's
    settings; PreflightError or ValueError (one line) when the run cannot go ahead."""
    t, load, tel = request.target, request.load, request.telemetry
    if t.replicas:
        target, fleet_warnings = asyncio.run(preflight_fleet(t.replicas, t.endpoint, t.model, t.api_key))
        for warning in fleet_warnings:
            warn(warning)
    else:
        target = asyncio.run(preflight(base, t.endpoint, t.model, t.api_key, t.metrics_url))
    wl = request.workload.build(target)
    settings = RunSettings(
        url=target.url, endpoint=t.endpoint, model=target.model, arrivals=request.arrivals,
        api_key=t.api_key, duration_s=load.duration_s, num_requests=load.num_requests,
        warmup_s=load.warmup_s, cooldown_s=load.cooldown_s, request_timeout_s=load.timeout_s,
        seed=load.seed, prompt_salt=None if load.reuse_prompts else new_salt(),
        ignore_eos=load.ignore_eos and target.ignore_eos_supported, temperature=load.temperature,
        metrics_url=target.metrics_url, steps_url=target.steps_url, steps_after=target.steps_after,
        scrape_interval_s=tel.scrape_interval_s, replicas=t.replicas, route=t.route,
        metrics_bind=tel.metrics_bind)
    settings.validate()
    request.scale.validate(settings, wl)
    config = resolved_config(settings, wl, target, load.slo_ms, bundled=t.bundled,
                             engine_args=t.engine_args)
    config.update(request.tags)
    return PreparedRun(request, target, wl, settings, config)


def record_run(prep: PreparedRun, warn: Warn, progress: ProgressHook | None = None) -> RunResult:
    """Run and store it, then every post-run step (`post_run.after_run`); the result, its
    summary carrying what those steps added. StoreError when the store cannot be written."""
    req, settings = prep.request, prep.settings
    tel = req.telemetry
    for warning in prep.config["workload_warnings"]:  # before the run, not only after it
        warn(warning)
    gpu = start_if_asked(tel.gpu_probe, tel.gpu_interval_s, settings.url, warn)
    # The watch lives in the process that sends: workers and Ray actors have none.
    capturer = (live_capturer(settings, tel.watch, gpu)
                if tel.watch is not None and not req.scale.active else None)
    try:
        result = execute_run(
            settings, prep.workload, req.db, prep.config, req.load.slo_ms, progress,
            scale=req.scale,
            watch=Watch(tel.watch.settings, capturer.submit) if capturer and tel.watch else None)
    finally:
        records = capturer.close() if capturer is not None else []
        if gpu is not None:
            gpu.stop()
    after_run(req.db, result, tel, gpu, records, warn)
    if tel.watch is not None and req.scale.active:
        result.summary["warnings"].append("the live watch runs in one process: with --workers "
                                          "or --ray it is off")
    return result


def run_and_record(request: RunRequest, base: str, warn: Warn,
                   progress: ProgressHook | None = None) -> RunResult:
    """`prepare_run` then `record_run`: one measured run, stored with every post-run step."""
    return record_run(prepare_run(request, base, warn), warn, progress)


def live_capturer(settings: RunSettings, watch: WatchSpec, gpu: object | None) -> IncidentCapturer:
    """What the live watch captures from: every target (its URL and /metrics), the engine's
    pids, the GPU probe's sampler when one runs."""
    targets = ([WatchTarget(r.name, r.url, r.metrics_url) for r in settings.replicas]
               if settings.replicas else [WatchTarget(None, settings.url, settings.metrics_url)])
    sampler = getattr(gpu, "sampler", None)
    return IncidentCapturer(targets, list(watch.engine_pids), api_key=settings.api_key,
                            gpu_sample=sampler.sample if sampler is not None else None,
                            max_captures=watch.max_captures)
