"""`infbench diagnose hang`: capture every rank (or read a capture), then the hang playbook."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.text import Text

from infbench.command_support import fail
from infbench.commands.diagnose.session import (
    JSON_OUT,
    SQL,
    run_playbook,
)
from infbench.console import make_console
from infbench.store import StoreError, open_store
from playbooks.hang import HangOptions, diagnose_hang, resolve_capture
from probes.hang import CaptureError, capture, store_capture


def hang(
    url: str | None = typer.Option(None, "--url", help="The engine: GET /debug/ranks, POST "
                                   "/debug/flight_recorder/dump, py-spy on every rank's pid."),
    pids: str | None = typer.Option(None, "--pids", help="The ranks' process ids, comma-separated "
                                    "(rank order, unless each process has a RANK variable)."),
    dumps: Path | None = typer.Option(None, "--dumps", help="A folder of Flight Recorder dumps "
                                      "(rank_0, nccl_trace_rank_1, ...) and optional "
                                      "stacks_<rank>.json (py-spy --json) or .txt (faulthandler)."),
    capture: str | None = typer.Option(None, "--capture", help="Diagnose a stored capture "
                                       "again (id, prefix or 'last')."),
    run: str | None = typer.Option(None, "--run", help="Link the capture to this run (id, "
                                   "prefix or 'last'): the findings are kept with it."),
    db: Path = typer.Option(Path("infbench.duckdb"), "--db", "--store", help="Store file (DuckDB)."),
    min_wait: float = typer.Option(1.0, "--min-wait", help="Seconds a collective must have "
                                   "been pending at the dump to count as stuck."),
    json_out: bool = JSON_OUT,
    sql: bool = SQL,
    save: bool = typer.Option(True, "--save/--no-save", help="Keep the findings in the store "
                              "with the linked run (replacing this playbook's earlier ones)."),
) -> None:
    """Which rank of a multi-rank engine is behind or mismatched, on which collective, and
    where every rank waits (runbook: playbooks/hang/hang.md)."""
    options = HangOptions(min_wait_s=min_wait)
    try:
        options.validate()
    except ValueError as exc:
        raise fail(str(exc)) from None
    given = [n for n, v in (("--url", url), ("--pids", pids), ("--capture", capture)) if v]
    if len(given) > 1 or (capture and dumps) or (url and dumps) or not (given or dumps):
        raise fail("give one of --url URL, --pids P,... (optionally with --dumps DIR), "
                    "--dumps DIR or --capture ID")
    if capture and run:
        raise fail("--run links a new capture; a stored capture keeps the run it was linked to")
    try:
        ref, run_id = capture, None
        if capture is None:
            ref, run_id = _capture_hang(url, pids, dumps, run, db, json_out)
        else:
            con = open_store(db, read_only=True)
            try:
                run_id = resolve_capture(con, capture)[1]
            finally:
                con.close()
    except (CaptureError, StoreError, ValueError) as exc:
        raise fail(str(exc)) from None
    run_playbook(lambda con: diagnose_hang(con, str(ref), options), db, save and run_id is not None,
                  json_out, sql, report_hint=run_id is not None)
    if run_id is None and not json_out:
        make_console().print(f"findings not kept with a run (link one with --run RUN); "
                             f"`infbench diagnose hang --capture {ref} --db {db}` shows them again",
                             style="dim", markup=False)


def _capture_hang(url: str | None, pids: str | None, dumps: Path | None, run: str | None,
                  db: Path, quiet: bool) -> tuple[str, str | None]:
    """Capture every rank, store it (linked to `run`); returns (capture id, run id)."""
    cap = capture(url, pids, dumps)
    con = open_store(db)
    try:
        store_capture(con, cap, run)
    finally:
        con.close()
    if not quiet:
        console = make_console()
        console.print(f"captured {cap.capture_id} into {db}", markup=False)
        for line in cap.summary_lines():
            console.print(Text(f"  {line}"))
    return cap.capture_id, cap.run_id
