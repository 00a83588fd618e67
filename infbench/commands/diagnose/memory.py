"""`infbench diagnose memory`: the memory playbook, optionally judging its cap by a sweep."""

from __future__ import annotations

from pathlib import Path

import typer

from infbench.command_support import fail
from infbench.commands.diagnose.cap_test import cap_sweep
from infbench.commands.diagnose.session import (
    DB,
    JSON_OUT,
    SAVE,
    SQL,
    run_playbook,
)
from infbench.loadgen.preflight import PreflightError
from infbench.store import StoreError
from playbooks.memory import MemoryOptions, diagnose_memory


def memory(
    run_id: str = typer.Argument(..., help="Run id, unique prefix, or 'last'."),
    db: Path = DB,
    test_cap: bool = typer.Option(False, "--test-cap", help="If the KV pool ran out: run a short "
                                  "closed-loop sweep at the recommended cap and at the run's "
                                  "concurrency against the same target, and judge the cap."),
    url: str | None = typer.Option(None, help="Target for --test-cap (default: the run's URL)."),
    cap_duration: float = typer.Option(8.0, "--cap-duration", help="Seconds per --test-cap point."),
    api_key: str | None = typer.Option(None, envvar="OPENAI_API_KEY", show_envvar=True,
                                       help="Bearer key for --test-cap's target (never stored)."),
    json_out: bool = JSON_OUT,
    sql: bool = SQL,
    save: bool = SAVE,
) -> None:
    """Where a run's memory went: fixed vs growing components, bytes per finished request and
    the suspects that rules out, KV exhaustion and a concurrency cap (runbook:
    playbooks/memory/memory.md)."""
    if not cap_duration > 0:
        raise fail(f"cap_duration: must be > 0, got {cap_duration}")
    sweep_id = None
    if test_cap:
        try:
            # The run is named once: the sweep's own runs become the store's 'last'.
            run_id, sweep_id = cap_sweep(db, run_id, url, cap_duration, api_key)
        except (PreflightError, StoreError, ValueError) as exc:
            raise fail(str(exc)) from None
    run_playbook(lambda con: diagnose_memory(con, run_id, MemoryOptions(cap_sweep_id=sweep_id)),
                  db, save, json_out, sql, report_hint=True)
