"""`infbench runs | show | export | report`: read recorded runs back from the store."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer
from rich.table import Table

from infbench.command_support import fail
from infbench.console import make_console, print_warning
from infbench.report.config_view import config_rows
from infbench.report.html import write_html_report
from infbench.report.terminal import print_summary
from infbench.store import StoreError, get_run, list_runs, open_store
from infbench.store.transfer import (
    EXPORT_FORMATS,
    TRACE_FORMAT,
    export_run,
    export_trace,
    import_run,
)

DB_OPTION = typer.Option(Path("infbench.duckdb"), help="Store file (DuckDB).")


def runs(db: Path = DB_OPTION, limit: int = typer.Option(50, help="Most recent N runs."),
         json_out: bool = typer.Option(False, "--json", help="JSON on stdout.")) -> None:
    """List the runs in a store, newest first."""
    try:
        con = open_store(db, read_only=True)
    except StoreError as exc:
        raise fail(str(exc)) from None
    try:
        rows = list_runs(con, limit)
        counts = dict(con.execute("SELECT run_id, count(*) FROM requests GROUP BY 1").fetchall())
    finally:
        con.close()
    if json_out:
        sys.stdout.write(json.dumps([{
            "run_id": r.run_id, "created_at": r.created_at.isoformat(), "status": r.status,
            "status_reason": r.status_reason, "model": r.model, "target_url": r.target_url,
            "endpoint": r.endpoint, "requests": counts.get(r.run_id, 0), "client_bound": r.client_bound,
            "workload": r.config.get("workload", {}).get("workload")} for r in rows], indent=2) + "\n")
        return
    t = Table(title=f"runs in {db}")
    # Run ids are what a user copies into the next command: never truncated or wrapped.
    t.add_column("run", no_wrap=True, min_width=max((len(r.run_id) for r in rows), default=3))
    for c in ("created (UTC)", "status", "model", "workload", "requests", "req/s", "p99 TTFT ms", "note"):
        t.add_column(c)
    for r in rows:
        s = r.summary or {}
        note = "CLIENT-BOUND" if r.client_bound else (r.status_reason or "")
        t.add_row(r.run_id, r.created_at.strftime("%Y-%m-%d %H:%M:%S"), r.status, r.model or "",
                  str(r.config.get("workload", {}).get("workload", "")), str(counts.get(r.run_id, 0)),
                  f"{s['request_throughput']:.2f}" if "request_throughput" in s else "-",
                  f"{s['p99_ttft_ms']:.1f}" if s.get("p99_ttft_ms") is not None else "-", note)
    make_console().print(t)


def show(run_id: str = typer.Argument(..., help="Run id, unique prefix, or 'last'."), db: Path = DB_OPTION,
         json_out: bool = typer.Option(False, "--json", help="Summary and config as JSON on stdout.")) -> None:
    """Show one run: its summary and configuration."""
    try:
        con = open_store(db, read_only=True)
        try:
            run = get_run(con, run_id)
        finally:
            con.close()
    except StoreError as exc:
        raise fail(str(exc)) from None
    if json_out:
        sys.stdout.write(json.dumps({"run_id": run.run_id, "status": run.status, "status_reason": run.status_reason,
                                     "config": run.config, "summary": run.summary}, indent=2, default=str) + "\n")
        return
    console = make_console()
    if run.summary is None:
        console.print(f"run {run.run_id}: {run.status} ({run.status_reason or 'no summary was written'})")
    else:
        print_summary(console, run.summary, {"run_id": run.run_id, "status": run.status,
                                             "model": run.model, "target_url": run.target_url})
    t = Table(title="Configuration", show_header=False, box=None, pad_edge=False, title_justify="left")
    t.add_column(style="bold", no_wrap=True)
    t.add_column(overflow="fold")
    for key, value in config_rows(run.config):
        t.add_row(key, value)
    console.print(t)


def export(run_id: str = typer.Argument(..., help="Run id, unique prefix, or 'last'."), db: Path = DB_OPTION,
           format: str = typer.Option("parquet", "--format", help=" | ".join(
               (*EXPORT_FORMATS, TRACE_FORMAT)) + " (trace: the requests as a trace "
               "`infbench run --workload trace` replays)"),
           out: Path | None = typer.Option(None, help="Output directory (default ./infbench-export-RUN)."),
           ) -> None:
    """Export a run's tables (Parquet or CSV), its diagnoses and findings included.

    The tables: runs, requests, chunks, metric_samples, engine_steps, client_samples, diagnoses
    and findings, and the profiler traces linked to the run (`trace import --run`) with all
    their events; `infbench import DIR` loads them into another store."""
    if format not in (*EXPORT_FORMATS, TRACE_FORMAT):
        raise fail(f"format: {format!r} is not one of {', '.join((*EXPORT_FORMATS, TRACE_FORMAT))}")
    try:
        con = open_store(db, read_only=True)
        try:
            run = get_run(con, run_id)
            target = out or Path(f"infbench-export-{run.run_id}")
            if format == TRACE_FORMAT:
                path, written, left_out = export_trace(con, run.run_id, target)
                files = [path]
            else:
                files = export_run(con, run.run_id, target, format)
        finally:
            con.close()
    except StoreError as exc:
        raise fail(str(exc)) from None
    if format == TRACE_FORMAT and left_out:
        print_warning(f"{left_out} of {written + left_out} requests have no recorded length and "
                      "were left out: a replay sends fewer requests, so a gate will not pair it "
                      "with this run")
    for f in files:
        typer.echo(str(f))


def report(run_id: str = typer.Argument(..., help="Run id, unique prefix, or 'last'."), db: Path = DB_OPTION,
           html: Path = typer.Option(..., "--html", help="Write a self-contained HTML report here."),
           ) -> None:
    """Write one self-contained HTML page with the run's plots (no network needed to view it)."""
    try:
        con = open_store(db, read_only=True)
        try:
            run = get_run(con, run_id)
            write_html_report(con, run, html)
        finally:
            con.close()
    except StoreError as exc:
        raise fail(str(exc)) from None
    typer.echo(str(html))


def import_cmd(
    paths: list[Path] = typer.Argument(..., help="Directory written by `infbench export`; with --from, "
                                                  "the tool's result files (several allowed)."),
    from_tool: str | None = typer.Option(None, "--from", help="Read another tool's results: "
                                         "aiperf | vllm-bench | guidellm | sglang-bench | inference-perf "
                                         "(see docs/imports.md)."),
    db: Path = typer.Option(Path("infbench.duckdb"), help="Store file to import into (created if absent)."),
) -> None:
    """Import an exported run into a store, or with --from another tool's results
    (vllm-bench, guidellm, aiperf, sglang-bench, inference-perf).

    An export directory brings a run someone attached to an incident; another tool's files
    become runs with their requests (docs/imports.md). Exit 2 on a bad file: nothing stored."""
    if from_tool is not None:
        _import_from(from_tool, paths, db)
        return
    if len(paths) != 1:
        raise fail(f"{len(paths)} paths given: an `infbench export` directory is imported one at a "
                    "time (several files need --from TOOL)")
    directory = paths[0]
    try:
        con = open_store(db)
        try:
            ids = import_run(con, directory)
            counts = {rid: con.execute(
                "SELECT (SELECT count(*) FROM requests WHERE run_id = $r), "
                "(SELECT count(*) FROM chunks WHERE run_id = $r), "
                "(SELECT count(*) FROM findings WHERE run_id = $r), "
                "(SELECT count(*) FROM traces WHERE run_id = $r)", {"r": rid}).fetchone()
                for rid in ids}
        finally:
            con.close()
    except StoreError as exc:
        raise fail(str(exc)) from None
    for rid in ids:
        n_req, n_chunks, n_find, n_traces = counts[rid] or (0, 0, 0, 0)
        traces = f", {n_traces} trace{'s' if n_traces != 1 else ''}" if n_traces else ""
        typer.echo(f"imported run {rid} ({n_req} requests, {n_chunks} chunks, {n_find} findings"
                   f"{traces}) from {directory} into {db}")


def _import_from(tool: str, paths: list[Path], db: Path) -> None:
    from infbench.imports import BadFile, read_files, store_imported
    from infbench.imports.check import report_lines

    try:
        runs = read_files(tool, paths)  # every file checked before the store is even opened
        con = open_store(db)
        try:
            stored = store_imported(con, runs)
        finally:
            con.close()
    except (BadFile, StoreError) as exc:
        raise fail(str(exc)) from None
    for s in stored:
        typer.echo(f"imported run {s.run_id} ({s.requests} requests, {s.chunks} chunks) from {tool} "
                   f"{s.source} ({s.record}) into {db}")
        for line in report_lines(s.summary):
            typer.echo(f"  {line}")


def register(app: typer.Typer) -> None:
    app.command("runs")(runs)
    app.command("show")(show)
    app.command("export")(export)
    app.command("report")(report)
