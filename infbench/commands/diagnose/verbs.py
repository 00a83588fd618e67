"""The playbook verbs with options of their own over one stored run or log: stalls, mbu,
replicas, startup."""

from __future__ import annotations

from pathlib import Path

import typer

from infbench.command_support import fail
from infbench.commands.diagnose.session import (
    DB,
    JSON_OUT,
    SAVE,
    SQL,
    run_playbook,
    validated,
)
from infbench.store import StoreError, open_store
from playbooks import StallOptions, diagnose_stalls
from playbooks.mbu import MbuOptions, diagnose_mbu
from playbooks.replicas import ReplicaOptions, diagnose_replicas
from playbooks.startup import StartupOptions, diagnose_startup
from probes.startup_log import StartupLogError, import_startup_log


def stalls(
    run_id: str = typer.Argument(..., help="Run id, unique prefix, or 'last'."),
    db: Path = DB,
    json_out: bool = JSON_OUT,
    itl_target: float = typer.Option(50.0, "--itl-target", help="ITL target (ms) for the token budget."),
    min_stall: float = typer.Option(50.0, "--min-stall", help="Smallest gap (ms) counted as a stall."),
    model: str | None = typer.Option(None, help="Model (overrides what the run recorded)."),
    gpu: str | None = typer.Option(None, help="GPU (overrides what the run recorded)."),
    sql: bool = SQL,
    save: bool = SAVE,
) -> None:
    """Why the token stream stutters: stall events, periodicity, prefill interference."""
    options = validated(StallOptions(itl_target_ms=itl_target, min_stall_ms=min_stall, model=model, gpu=gpu))
    run_playbook(lambda con: diagnose_stalls(con, run_id, options), db, save, json_out, sql,
                  report_hint=True)


def mbu(
    ref: str = typer.Argument(..., help="Run id, unique prefix or 'last'; or a trace id linked to a run."),
    db: Path = DB,
    reported: float | None = typer.Option(None, "--reported", help="The MBU a dashboard shows "
                                          "(0.60 or 60): names the mistake that explains it."),
    model: str | None = typer.Option(None, help="Model (overrides what the run recorded)."),
    gpu: str | None = typer.Option(None, help="GPU (overrides what the run recorded)."),
    tp: int | None = typer.Option(None, "--tp", help="Tensor-parallel size (overrides the run's)."),
    json_out: bool = JSON_OUT,
    sql: bool = SQL,
    save: bool = SAVE,
) -> None:
    """Decode MBU computed right, where the missing bandwidth goes, and which dashboard mistake
    explains a reported figure (runbook: playbooks/mbu/mbu.md)."""
    options = validated(MbuOptions(reported=reported, model=model, gpu=gpu, tensor_parallel_size=tp))
    run_playbook(lambda con: diagnose_mbu(con, ref, options), db, save, json_out, sql,
                  report_hint=False)


def replicas(
    run_id: str = typer.Argument(..., help="Run id, unique prefix, or 'last' (a fleet run: infbench run --url A --url B ...)."),
    db: Path = DB,
    min_effect: float = typer.Option(0.10, "--min-effect", help="Slower means at least this much (0.10 = 10%) higher latency than the peers at matched load."),
    busier_ratio: float = typer.Option(1.25, "--busier-ratio", help="Busier means sent this many times the peers' requests, or meeting this many times their load."),
    replica_url: list[str] = typer.Option([], "--replica-url", help="A one-URL run: a replica's own address, for the measurement plan's commands (repeat per replica)."),
    json_out: bool = JSON_OUT,
    sql: bool = SQL,
    save: bool = SAVE,
) -> None:
    """Which replica drags the fleet: slower at equal load or only busier, its share of the
    fleet's p99, then its GPU telemetry against its peers' (runbook: playbooks/replicas/replicas.md)."""
    options = validated(ReplicaOptions(min_effect=min_effect, busier_ratio=busier_ratio,
                                       db=str(db), replica_urls=list(replica_url)))
    run_playbook(lambda con: diagnose_replicas(con, run_id, options), db, save, json_out, sql,
                  report_hint=True)


def startup(
    logfile: Path = typer.Argument(..., help="The engine's start-up log (vLLM, SGLang, the bundled engine)."),
    db: Path = typer.Option(Path("infbench.duckdb"), help="Store file (DuckDB); the log is imported into it."),
    run: str | None = typer.Option(None, "--run", help="Link the log to this run (id, prefix or "
                                   "'last') and keep the findings with it."),
    model: str | None = typer.Option(None, help="Model (when the log does not say)."),
    gpu: str | None = typer.Option(None, help="GPU (when the log does not say)."),
    tp: int | None = typer.Option(None, "--tp", help="Tensor-parallel size (when the log does not say)."),
    max_model_len: int | None = typer.Option(None, "--max-model-len", help="max_model_len (when the log does not say)."),
    gpu_memory_utilization: float | None = typer.Option(None, "--gpu-memory-utilization",
                                                        help="As the engine was started."),
    dtype: str | None = typer.Option(None, "--dtype", help="Weight format (auto, bf16, fp8, ...)."),
    kv_cache_dtype: str | None = typer.Option(None, "--kv-cache-dtype", help="KV cache format."),
    json_out: bool = JSON_OUT,
    sql: bool = SQL,
) -> None:
    """Why an engine did (not) start: its start-up log's memory phases beside `infbench plan
    memory`'s arithmetic, and the priced fixes (runbook: playbooks/startup/startup.md)."""
    options = StartupOptions(model=model, gpu=gpu, tp=tp, max_model_len=max_model_len,
                             gpu_memory_utilization=gpu_memory_utilization, dtype=dtype,
                             kv_cache_dtype=kv_cache_dtype)
    try:
        options.validate()
        con = open_store(db)
        try:
            imported = import_startup_log(con, logfile, run)
        finally:
            con.close()
    except (StartupLogError, StoreError, ValueError) as exc:
        raise fail(str(exc)) from None
    run_playbook(lambda con: diagnose_startup(con, imported.log_id, options), db,
                  imported.run_id is not None, json_out, sql, report_hint=False)
