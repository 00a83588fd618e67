"""The NVML probe beside a run: `GpuRunProbe.start()` before the load, `.finish()` after.

`infbench run --gpu-probe` and `infbench probe gpu` use it. Samples are stamped with the
monotonic clock while the run goes on (its t0 is only final once the run has started) and
moved onto the run's time axis when stored. Without the library or a GPU, `start` raises
`NvmlUnavailable` whose message is the one line to print; the caller runs on without it.
Owns: the NVML session and the sampling thread, from start() until finish() or close().
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import duckdb

from infbench.store import create_run, finish_run, new_run_id, open_store
from infbench.store.gpu_samples import insert_gpu_samples
from probes.gpu.nvml import NvmlSampler, NvmlUnavailable, load_nvml
from probes.gpu.periodic import PeriodicSampler, to_run_axis

DEFAULT_INTERVAL_S = 1.0


class GpuRunProbe:
    def __init__(self, sampler: NvmlSampler, periodic: PeriodicSampler) -> None:
        self.sampler = sampler
        self.periodic = periodic
        self._rows: list[dict[str, Any]] | None = None

    @classmethod
    def start(cls, interval_s: float = DEFAULT_INTERVAL_S, *, instance: str | None = None,
              nvml: ModuleType | None = None) -> GpuRunProbe:
        """Open NVML and start sampling; NvmlUnavailable (one line) when it cannot."""
        sampler = NvmlSampler(nvml if nvml is not None else load_nvml(), instance=instance)
        periodic = PeriodicSampler(sampler.sample, interval_s)  # a bad interval fails first
        sampler.open()
        periodic.start()
        return cls(sampler, periodic)

    def stop(self) -> list[dict[str, Any]]:
        """Stop sampling and close NVML; the rows (monotonic t_ns). Idempotent."""
        if self._rows is None:
            self._rows = self.periodic.stop()
            self.sampler.close()
        return self._rows

    @property
    def errors(self) -> list[str]:
        return self.periodic.errors

    def finish(self, con: duckdb.DuckDBPyConnection, run_id: str) -> int:
        """Stop and store the samples under run_id on its time axis; returns rows written."""
        rows = self.stop()
        found = con.execute("SELECT t0_monotonic_ns FROM runs WHERE run_id = ?", [run_id]).fetchone()
        if found is None or found[0] is None:
            raise ValueError(f"run {run_id}: no such run (or no t0) to attach GPU samples to")
        return insert_gpu_samples(con, run_id, to_run_axis(rows, int(found[0])))


def probe_for(duration_s: float, interval_s: float = DEFAULT_INTERVAL_S, *,
              nvml: ModuleType | None = None, instance: str | None = None) -> tuple[list[dict[str, Any]], int]:
    """Sample for duration_s seconds (standalone `infbench probe gpu`): rows and the t0 they
    are relative to."""
    if not duration_s > 0:
        raise ValueError(f"duration: must be > 0 seconds, not {duration_s}")
    t0 = time.monotonic_ns()
    probe = GpuRunProbe.start(interval_s, instance=instance, nvml=nvml)
    try:
        time.sleep(duration_s)
    finally:
        rows = probe.stop()
    return to_run_axis(rows, t0), t0


def store_probe(con: duckdb.DuckDBPyConnection, rows: list[dict[str, Any]], t0_ns: int,
                config: dict[str, Any]) -> str:
    """Store a standalone probe as a run of its own (endpoint `gpu-probe`, no requests), so
    the report and SQL find its samples like a load run's."""
    run_id = new_run_id()
    create_run(con, run_id=run_id, config={"probe": "gpu", **config}, target_url="",
               model="", endpoint="gpu-probe", t0_monotonic_ns=t0_ns)
    insert_gpu_samples(con, run_id, rows)
    finish_run(con, run_id, status="completed", reason=None)
    return run_id


def start_if_asked(enabled: bool, interval_s: float, instance: str | None,
                   warn: Callable[[str], None], *, nvml: ModuleType | None = None) -> GpuRunProbe | None:
    """`infbench run --gpu-probe`: the probe, or None after one warning line saying why not
    (no nvidia-ml-py, no driver, no GPU); the run goes on either way."""
    if not enabled:
        return None
    try:
        return GpuRunProbe.start(interval_s, instance=instance, nvml=nvml)
    except NvmlUnavailable as exc:
        warn(str(exc))
        return None


def store_after_run(probe: GpuRunProbe | None, db: str | Path, run_id: str) -> dict[str, Any] | None:
    """Store the probe's samples under the finished run; what the summary says about them."""
    if probe is None:
        return None
    con = open_store(db)
    try:
        rows = probe.finish(con, run_id)
    finally:
        con.close()
    gpus = len({r.get("gpu") for r in probe.stop()})
    return {"samples": rows, "gpus": gpus, "interval_s": probe.periodic.interval_s,
            "cpu_s": round(probe.periodic.cpu_s, 4), "errors": list(probe.errors)}
