"""One run from start to end: store row, writer, runner, signals, cool-down, summary, status.

Nothing is written before preflight passed (the caller runs it first). From `create_run` on,
every path ends in `finish_run` with completed, completed_with_errors, interrupted or failed,
and everything received so far is in the store.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from infbench.loadgen.cache_share import prefix_cache_check
from infbench.loadgen.fingerprint import store_fingerprint
from infbench.loadgen.fleet.summary import fleet_summary
from infbench.loadgen.http.client import run_timed
from infbench.loadgen.input_lengths import input_length_check
from infbench.loadgen.run.outcome import Outcome, classify
from infbench.loadgen.run.runner import LiveStats, Runner, RunOutcome, RunSettings
from infbench.loadgen.summary import mark_cooldown, summarize
from infbench.loadgen.telemetry.watch import Trigger, Watch
from infbench.loadgen.workers.record import record_workers, worker_warnings
from infbench.loadgen.workers.scale import Scale
from infbench.loadgen.workloads.base import Workload
from infbench.store import BatchWriter, create_run, finish_run, new_run_id, open_store

if TYPE_CHECKING:
    from infbench.loadgen.workers.coordinator import Coordinator

STORE_MEMORY_LIMIT = "64MB"

ProgressHook = Callable[[LiveStats, RunSettings], Coroutine[Any, Any, None]]


@dataclass
class RunResult:
    run_id: str
    outcome: RunOutcome
    summary: dict[str, Any]
    signal_name: str | None
    status: Outcome
    triggers: list[Trigger] = field(default_factory=list)  # the live watch's, in order


async def _drive(runner: Runner | Coordinator, settings: RunSettings, progress: ProgressHook | None) -> tuple[RunOutcome, str | None]:
    loop = asyncio.get_running_loop()
    caught: list[str] = []

    def on_signal(name: str) -> None:
        caught.append(name)
        runner.interrupt(f"{name} received")

    installed = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, on_signal, sig.name)
            installed.append(sig)
        except (NotImplementedError, RuntimeError):
            pass
    progress_task = asyncio.create_task(progress(runner.stats, settings)) if progress else None
    try:
        outcome = await runner.run()
    finally:
        if progress_task is not None:
            progress_task.cancel()
            await asyncio.gather(progress_task, return_exceptions=True)
        for sig in installed:
            loop.remove_signal_handler(sig)
    return outcome, (caught[0] if caught else None)


def _set_t0(con: Any, run_id: str, t0_ns: int) -> None:
    """The run's start on the monotonic clock its rows use, and on the Unix clock (read now,
    as an offset between the two, so the start stays exact): what other hosts' records, such
    as Prometheus samples, are put on the run's axis with."""
    unix_ns = t0_ns + (time.time_ns() - time.monotonic_ns())
    con.execute("UPDATE runs SET t0_monotonic_ns = ?, t0_unix_ns = ? WHERE run_id = ?",
                [t0_ns, unix_ns, run_id])


def execute_run(
    settings: RunSettings,
    workload: Workload,
    db_path: str | Path,
    config: dict[str, Any],
    slo: dict[str, float] | None = None,
    progress: ProgressHook | None = None,
    scale: Scale | None = None,
    watch: Watch | None = None,
) -> RunResult:
    """Run and record. Ownership: opens and closes the store connection itself. `scale`: the
    load split across worker processes or Ray actors (`loadgen.workers`); None: this process.
    `watch`: the live watch (one process only; `RunResult.triggers` lists what it saw)."""
    if settings.api_key and settings.api_key in repr(config):
        raise ValueError("config: the API key must never be part of the stored configuration")
    con = open_store(db_path)
    try:
        # DuckDB's buffer pool would otherwise grow with the run (80% of RAM by default); its
        # pages are file-backed, so a cap costs re-reads, never data.
        con.execute(f"SET memory_limit = '{STORE_MEMORY_LIMIT}'")
        run_id = new_run_id()
        t0 = time.monotonic_ns()
        create_run(con, run_id=run_id, config=config, target_url=settings.url, model=settings.model,
                   endpoint=settings.endpoint, t0_monotonic_ns=t0)
        writer = BatchWriter(con, run_id)
        coordinator = (scale.coordinator(settings, workload, writer, t0)
                       if scale is not None and scale.active else None)
        runner: Runner | Coordinator = (
            coordinator if coordinator is not None
            else Runner(settings, workload, writer, t0, watch=watch))
        try:
            outcome, sig = run_timed(_drive(runner, settings, progress))
        except BaseException as exc:
            try:
                writer.close()
                _set_t0(con, run_id, runner.t0_ns)
            finally:
                reason = "interrupted" if isinstance(exc, KeyboardInterrupt) else f"{type(exc).__name__}: {exc}"
                ended = "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"
                finish_run(con, run_id, status=ended, reason=reason[:500])
            raise
        writer.close()
        # The runner restarts its clock after opening connections; rows are relative to that.
        _set_t0(con, run_id, runner.t0_ns)
        workers = record_workers(con, run_id, coordinator) if coordinator is not None else None
        mark_cooldown(con, run_id, outcome.last_send_ns, settings.cooldown_s)
        a = settings.arrivals
        summary = summarize(con, run_id, slo, open_loop_uncapped=a.kind != "closed" and a.concurrency == 0)
        status = classify(outcome.status, outcome.reason, summary["errors"], summary["requests_sent"])
        summary["status"] = status.status
        summary["status_reason"] = status.reason
        summary["error_rate"] = status.error_rate
        summary["workload_fingerprint"] = store_fingerprint(con, run_id)
        summary["prefix_cache"], cache_warning = prefix_cache_check(con, run_id)
        if cache_warning is not None:
            summary["warnings"].append(cache_warning)
        summary["input_length"], length_warning = input_length_check(con, run_id)
        if length_warning is not None:
            summary["warnings"].append(length_warning)
        summary["input_sizing"] = outcome.sizing
        # Which rows of a trace or dataset were used, and what was skipped or changed in them.
        summary["workload_rows"] = (config.get("workload") or {}).get("rows")
        summary["warnings"].extend(config.get("workload_warnings") or [])
        summary["scrapes"] = outcome.scrapes
        summary["scrape_errors"] = outcome.scrape_errors
        if workers is not None and coordinator is not None:  # which worker sent what, lost what, and its clock
            summary["workers"] = workers
            summary["warnings"].extend(worker_warnings(workers, coordinator))
        if settings.replicas:  # a fleet run: per replica and for the fleet
            summary["fleet"] = fleet_summary(con, run_id, settings.replicas, settings.route,
                                             outcome.replica_scrapes)
        finish_run(con, run_id, status=status.status, reason=status.reason, summary=summary,
                   client_bound=summary["client_bound"])
        watcher = getattr(runner, "watcher", None)
        return RunResult(run_id, outcome, summary, sig, status,
                         list(watcher.triggers) if watcher is not None else [])
    finally:
        con.close()
