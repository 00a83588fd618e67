"""`infbench diagnose <playbook> RUN`: run a playbook over a recorded run, print its findings
and keep them in the store with the run (for `infbench report` and `infbench export`)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import duckdb
import typer
from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from infbench.console import make_console, print_error, print_warning
from infbench.store import StoreError, open_store
from infbench.store.findings import save_diagnosis
from playbooks import Diagnosis, StallOptions, diagnose_stalls
from playbooks.mbu import MbuOptions, diagnose_mbu
from playbooks.replicas import ReplicaOptions, diagnose_replicas

app = typer.Typer(help="Diagnose a recorded run with a playbook (runbooks: playbooks/*/*.md).",
                  no_args_is_help=True, add_completion=False)

_STYLE = {"critical": "bold red", "warning": "yellow", "info": "cyan"}


@app.callback()
def _playbooks() -> None:
    # Typer turns an app with a single command into that command; this keeps `diagnose` a
    # group, so `infbench diagnose stalls RUN` stays the spelling as playbooks are added.
    pass


def _fail(message: str) -> typer.Exit:
    print_error(message)
    return typer.Exit(2)


def print_diagnosis(console: Console, diag: Diagnosis, show_sql: bool = False) -> None:
    have = ", ".join(k for k, v in diag.data_sources.items() if v) or "nothing"
    missing = ", ".join(k for k, v in diag.data_sources.items() if not v)
    console.print(f"[bold]{diag.playbook}[/] playbook on run [bold]{diag.run_id}[/]")
    console.print(f"data used: {have}" + (f"  [dim](missing: {missing})[/]" if missing else ""))
    base = diag.context.get("itl_baseline")
    if base:
        console.print(f"ITL: median {base['median_ms']:.2f} ms, p99 {base['p99_ms']:.2f} ms, "
                      f"max {base['max_ms']:.1f} ms over {base['gaps']} gaps; stall threshold "
                      f"{base['threshold_ms']:.1f} ms")
    ev = diag.context.get("stall_events")
    if ev:
        console.print(f"stall events: {ev['engine_wide']} engine-wide, {ev['private']} private, "
                      f"{ev['undetermined']} undetermined")
    _print_replicas(console, diag.context.get("replicas"))
    if not diag.findings:
        console.print("[green]No findings: nothing in this run points to a stall or latency "
                      "pathology.[/]")
    for f in diag.sorted_findings():
        t = Table(show_header=True, box=None, pad_edge=False)
        t.add_column("evidence", style="bold")
        t.add_column("values")
        for e in f.evidence:
            vals = ", ".join(f"{k}={v}" for k, v in e.values.items())
            t.add_row(e.name, vals + (f"\n[dim]{e.note}[/]" if e.note else ""))
            if show_sql and e.sql:
                t.add_row("", f"[dim]{e.sql}[/]")
        body = Table.grid()
        body.add_row(f.summary)
        body.add_row("")
        body.add_row(t)
        body.add_row("")
        body.add_row("[bold]next:[/] " + "\n      ".join(f.next_actions))
        style = _STYLE[f.severity]
        console.print(Panel(body, title=f"[{style}]{f.severity.upper()}[/] {f.title} "
                            f"[dim]({f.verdict}, confidence {f.confidence:.2f} "
                            f"{f.confidence_label})[/]", border_style=style))
    split = diag.context.get("ttft_split")
    if split:
        console.print(f"TTFT split (means): client {split['client_ttft_ms']:.1f} ms = engine "
                      f"{split['engine_ttft_ms']:.1f} ms (queue {split['engine_queue_ms'] or 0:.1f}) "
                      f"+ outside the engine {split.get('outside_engine_ms', 0):.1f} ms")
    if "bimodal_itl" in diag.context:
        console.print(f"[dim]{diag.context['bimodal_itl']}[/]")
    for note in diag.notes:
        console.print(f"[dim]note: {note}[/]")


def _print_replicas(console: Console, rows: list[dict] | None) -> None:
    """The replicas playbook: each replica's latency ratio to its peers at matched load."""
    if not rows:
        return
    t = Table(title="Replicas vs their peers at matched load (ratio, interval)", box=None)
    metrics = [m for m in ("ttft", "tpot", "step") if f"{m}_ratio" in rows[0]]
    for c in ("replica", *metrics, "load", "requests", "verdict"):
        t.add_column(c, justify="left" if c in ("replica", "verdict") else "right")
    for r in rows:
        cells = []
        for m in metrics:
            ratio, iv = r.get(f"{m}_ratio"), r.get(f"{m}_interval")
            cells.append("-" if ratio is None or iv is None else f"{ratio:.2f} ({iv[0]:.2f}-{iv[1]:.2f})")
        verdict = "slower" if r["slower"] else "busier" if r["busier"] else "ok"
        t.add_row(Text(str(r["replica"])), *cells,
                  "-" if r.get("load_ratio") is None else f"{r['load_ratio']:.2f}",
                  "-" if r.get("request_ratio") is None else f"{r['request_ratio']:.2f}", verdict)
    console.print(t)


def _open(db: Path, save: bool) -> tuple[duckdb.DuckDBPyConnection, str | None]:
    """Writable when saving (an older file is migrated); a store that cannot be opened for
    writing is still diagnosed read-only, and the reason it will not be saved comes back.
    The caller owns and closes the connection."""
    if not save or not db.exists():  # a missing file must not be created by a diagnosis
        return open_store(db, read_only=True), None
    try:
        return open_store(db), None
    except StoreError as exc:
        return open_store(db, read_only=True), str(exc)


@app.command("stalls")
def stalls(
    run_id: str = typer.Argument(..., help="Run id, unique prefix, or 'last'."),
    db: Path = typer.Option(Path("infbench.duckdb"), help="Store file (DuckDB)."),
    json_out: bool = typer.Option(False, "--json", help="The diagnosis as JSON on stdout."),
    itl_target: float = typer.Option(50.0, "--itl-target", help="ITL target (ms) for the token budget."),
    min_stall: float = typer.Option(50.0, "--min-stall", help="Smallest gap (ms) counted as a stall."),
    model: str | None = typer.Option(None, help="Model (overrides what the run recorded)."),
    gpu: str | None = typer.Option(None, help="GPU (overrides what the run recorded)."),
    sql: bool = typer.Option(False, "--sql", help="Show the SQL behind each piece of evidence."),
    save: bool = typer.Option(True, "--save/--no-save", help="Keep the findings in the store "
                              "with the run (replacing this playbook's earlier ones)."),
) -> None:
    """Why the token stream stutters: stall events, periodicity, prefill interference."""
    try:
        options = StallOptions(itl_target_ms=itl_target, min_stall_ms=min_stall, model=model, gpu=gpu)
        options.validate()
    except ValueError as exc:
        raise _fail(str(exc).splitlines()[0]) from None
    _run_playbook(lambda con: diagnose_stalls(con, run_id, options), db, save, json_out, sql,
                  report_hint=True)


@app.command("mbu")
def mbu(
    ref: str = typer.Argument(..., help="Run id, unique prefix or 'last'; or a trace id linked to a run."),
    db: Path = typer.Option(Path("infbench.duckdb"), help="Store file (DuckDB)."),
    reported: float | None = typer.Option(None, "--reported", help="The MBU a dashboard shows "
                                          "(0.60 or 60): names the mistake that explains it."),
    model: str | None = typer.Option(None, help="Model (overrides what the run recorded)."),
    gpu: str | None = typer.Option(None, help="GPU (overrides what the run recorded)."),
    tp: int | None = typer.Option(None, "--tp", help="Tensor-parallel size (overrides the run's)."),
    json_out: bool = typer.Option(False, "--json", help="The diagnosis as JSON on stdout."),
    sql: bool = typer.Option(False, "--sql", help="Show the SQL behind each piece of evidence."),
    save: bool = typer.Option(True, "--save/--no-save", help="Keep the findings in the store "
                              "with the run (replacing this playbook's earlier ones)."),
) -> None:
    """Decode MBU computed right, where the missing bandwidth goes, and which dashboard mistake
    explains a reported figure (runbook: playbooks/mbu/mbu.md)."""
    try:
        options = MbuOptions(reported=reported, model=model, gpu=gpu, tensor_parallel_size=tp)
        options.validate()
    except ValueError as exc:
        raise _fail(str(exc).splitlines()[0]) from None
    _run_playbook(lambda con: diagnose_mbu(con, ref, options), db, save, json_out, sql,
                  report_hint=False)


@app.command("replicas")
def replicas(
    run_id: str = typer.Argument(..., help="Run id, unique prefix, or 'last' (a fleet run: infbench run --url A --url B ...)."),
    db: Path = typer.Option(Path("infbench.duckdb"), help="Store file (DuckDB)."),
    min_effect: float = typer.Option(0.10, "--min-effect", help="Slower means at least this much (0.10 = 10%) higher latency than the peers at matched load."),
    busier_ratio: float = typer.Option(1.25, "--busier-ratio", help="Busier means sent this many times the peers' requests, or meeting this many times their load."),
    replica_url: list[str] = typer.Option([], "--replica-url", help="A one-URL run: a replica's own address, for the measurement plan's commands (repeat per replica)."),
    json_out: bool = typer.Option(False, "--json", help="The diagnosis as JSON on stdout."),
    sql: bool = typer.Option(False, "--sql", help="Show the SQL behind each piece of evidence."),
    save: bool = typer.Option(True, "--save/--no-save", help="Keep the findings in the store "
                              "with the run (replacing this playbook's earlier ones)."),
) -> None:
    """Which replica drags the fleet: slower at equal load or only busier, its share of the
    fleet's p99, then its GPU telemetry against its peers' (runbook: playbooks/replicas/replicas.md)."""
    try:
        options = ReplicaOptions(min_effect=min_effect, busier_ratio=busier_ratio, db=str(db),
                                 replica_urls=list(replica_url))
        options.validate()
    except ValueError as exc:
        raise _fail(str(exc).splitlines()[0]) from None
    _run_playbook(lambda con: diagnose_replicas(con, run_id, options), db, save, json_out, sql,
                  report_hint=True)


def _run_playbook(run: Callable[[duckdb.DuckDBPyConnection], Diagnosis], db: Path, save: bool,
                  json_out: bool, sql: bool, *, report_hint: bool) -> None:
    """Diagnose, keep the findings with the run unless told not to (a store that cannot be
    written is still diagnosed, with a warning), then show them."""
    saved: int | None = None
    try:
        con, not_saved = _open(db, save)
        try:
            diag = run(con)
            if save and not_saved is None:
                try:
                    saved = save_diagnosis(con, diag.to_dict())
                except StoreError as exc:
                    not_saved = str(exc)
        finally:
            con.close()
    except (StoreError, ValueError) as exc:
        raise _fail(str(exc).splitlines()[0]) from None
    if not_saved is not None:
        print_warning(f"findings diagnosed but not saved: {not_saved.splitlines()[0]}")
    if json_out:
        sys.stdout.write(json.dumps(diag.to_dict(), indent=2, default=str) + "\n")
        return
    console = make_console()
    print_diagnosis(console, diag, sql)
    if saved is not None:
        hint = (f"; `infbench report {diag.run_id} --db {db} --html FILE` shows them"
                if report_hint else "")
        console.print(f"saved {saved} finding(s) to {db}{hint}", style="dim", markup=False)
