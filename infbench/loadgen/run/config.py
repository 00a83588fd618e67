"""The resolved configuration a run is stored with: everything that decided it, no secret."""

from __future__ import annotations

from typing import Any

from infbench import __version__
from infbench.loadgen.preflight import Target
from infbench.loadgen.run.runner import RunSettings
from infbench.loadgen.workloads import Workload
from infbench.loadgen.workloads.build import workload_warnings


def resolved_config(settings: RunSettings, wl: Workload, target: Target, slo: dict[str, float], *,
                    bundled: bool, engine_args: list[str]) -> dict[str, Any]:
    """Everything that decided this run, for the runs table. The API key is left out on purpose."""
    a = settings.arrivals
    return {
        "infbench_version": __version__,
        "target": {"url": settings.url, "model": settings.model, "endpoint": settings.endpoint,
                   "served_models": target.models, "bundled_engine": bundled,
                   "engine_args": engine_args if bundled else None,
                   "api_key_set": settings.api_key is not None,
                   "metrics_url": settings.metrics_url, "steps_url": settings.steps_url},
        "engine_config": target.engine_config,
        "workload": wl.describe(),  # the load's identity: the gate compares it between runs
        # What the run sends differently from what was asked (rows skipped, sorted or changed,
        # lengths below what the target takes), also printed before the run and in the summary.
        "workload_warnings": workload_warnings(wl),
        # How prompts were sized: the target's token model (source `tokenize`: exact counts from
        # its /tokenize), and for conversations the template tokens each turn's target includes.
        "token_model": {**target.tokens.describe(), "tokenize": target.tokenize,
                        "max_model_len": target.max_model_len},
        "arrivals": {"kind": a.kind, "rate": a.rate, "burstiness": a.burstiness,
                     "concurrency": a.concurrency, "time_scale": a.time_scale},
        "stop": {"duration_s": settings.duration_s, "num_requests": settings.num_requests},
        "warmup_s": settings.warmup_s, "cooldown_s": settings.cooldown_s,
        "request_timeout_s": settings.request_timeout_s, "seed": settings.seed,
        # Not part of the load's identity (the gate pairs salted repeats): the text differs,
        # the schedule and lengths do not.
        "prompts": {"reuse": settings.prompt_salt is None,
                    "salt": None if settings.prompt_salt is None else f"{settings.prompt_salt:016x}"},
        "sampling": {"temperature": settings.temperature, "ignore_eos": settings.ignore_eos,
                     "ignore_eos_supported": target.ignore_eos_supported,
                     "stream_options.include_usage": True},
        "slo_ms": slo,
        "scrape_interval_s": settings.scrape_interval_s,
        # A fleet run only: its replicas (the first is target.url) and the routing.
        **({"fleet": {"replicas": [r.describe() for r in settings.replicas],
                      "route": settings.route.describe(settings.replicas)}}
           if settings.replicas else {}),
    }
