"""The steps after a run's rows are stored: the target's configuration linked to the run, the
GPU series the targets exported moved into gpu_samples, the Prometheus pull, the GPU probe's
samples, the live watch's captures.

None of them changes the run's status or exit code: a step that fails is one warning line,
and what a step found goes into the summary the caller prints.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import duckdb

from infbench.config.model import CaptureError
from infbench.config.run_link import link_run_config
from infbench.loadgen.run.execute import RunResult
from infbench.pipeline.request import TelemetrySpec
from infbench.store import StoreError, open_store
from probes.gpu.prometheus import convert_pulled
from probes.gpu.run_metrics import gpu_samples_from_run
from probes.gpu.run_probe import GpuRunProbe, store_after_run
from probes.prometheus.pull import pull_into_store
from probes.watch.capture import CaptureRecord
from probes.watch.store import store_watch_after_run

# Longest wait after the run for Prometheus to scrape the target once more (its default
# interval is 15 s); the wait ends at the first scrape after the run's end.
PROMETHEUS_WAIT_S = 35.0


def after_run(db: Path, result: RunResult, telemetry: TelemetrySpec, gpu: GpuRunProbe | None,
              records: list[CaptureRecord], warn: Callable[[str], None]) -> None:
    """Every post-run step for the stored run `result`, in order; adds to `result.summary`."""
    run_id = result.run_id
    # The target's configuration (reference engine /engine/config, vLLM cache_config_info),
    # stored linked to the run so `infbench config diff` can compare runs' engines.
    try:
        link_run_config(db, run_id)
    except (StoreError, CaptureError) as exc:
        warn(f"the target's configuration was not captured: {exc}")
    # GPU telemetry the targets exported in dcgm-exporter names (the reference engine's
    # simulated device, a replica's dcgm-exporter): per replica into gpu_samples.
    try:
        con = open_store(db)
        try:
            gpu_samples_from_run(con, run_id)
        finally:
            con.close()
    except (StoreError, ValueError, duckdb.Error) as exc:
        warn(f"GPU telemetry scraped from the targets was not stored: {exc}")
    prom = telemetry.prometheus
    if prom is not None:
        try:
            report = pull_into_store(db, run_id, prom, selector=telemetry.prometheus_selector,
                                     wait_s=PROMETHEUS_WAIT_S)
            result.summary["prometheus"] = report.as_dict()
            if report.warning:
                result.summary["warnings"].append(report.warning)
        except StoreError as exc:
            warn(f"Prometheus series were not stored: {exc}")
    try:  # NVML samples (--gpu-probe) and the dcgm series a --prometheus pull brought
        result.summary["gpu_probe"] = store_after_run(gpu, db, run_id)
        if prom is not None and result.summary.get("prometheus", {}).get("families", {}).get("dcgm"):
            result.summary["prometheus"]["gpu_samples"] = convert_pulled(db, run_id)
    except (StoreError, ValueError, duckdb.Error) as exc:
        warn(f"GPU telemetry was not stored: {exc}")
    if records:  # what the live watch saw and captured, on the run's time axis
        try:
            result.summary["watch"] = store_watch_after_run(db, run_id, records)
        except (StoreError, duckdb.Error) as exc:
            warn(f"the live watch's captures were not stored: {exc}")
