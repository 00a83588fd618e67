"""`infbench trace import | list | analyze`: profiler traces in the store and their timelines.

Imports are made where they are used: `trace analyze FILE` reads the file in memory and is
timed against HTA as a whole process, so it must not pay for DuckDB and the store (half a
second of imports) that only the store's commands use.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from infbench.command_support import fail
from probes.traces.errors import TraceError
from probes.traces.timeline_sql import ANALYSES

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table


def _table(**kw: Any) -> Table:
    from rich.table import Table

    return Table(**kw)


def _console() -> Console:
    from infbench.console import make_console

    return make_console()


app = typer.Typer(help="Profiler traces: import PyTorch profiler / Nsight Systems traces, analyse their timelines.",
                  no_args_is_help=True, add_completion=False)

DB_OPTION = typer.Option(Path("infbench.duckdb"), help="Store file (DuckDB).")

_TITLES = {
    "temporal": "Temporal breakdown per rank (HTA): idle / compute / non-compute share of kernel time",
    "idle": "Idle time per stream by cause (HTA: host_wait, kernel_wait < 30 us, other)",
    "idle_stats": "Idle intervals per stream and cause (us)",
    "kernel_types": "Kernel time by type, all ranks (HTA), overlaps counted once",
    "kernels": "Top kernels per rank and type (HTA: the tail folded into 'others')",
    "overlap": "Communication time overlapped by computation, per rank (HTA)",
    "launch_summary": "Launch delay (kernel start - launch call end, us) per rank",
    "steps": "Steps: GPU idle inside the work each step launched (CPU-bound at idle share >= 0.5)",
    "cpu_steps": "Steps of a CPU-only profile: the share of each step its CPU ops cover",
}


@app.command("import")
def import_cmd(
    path: Path = typer.Argument(..., help="Kineto JSON (.json/.json.gz), a directory of rank "
                                "files, or an Nsight Systems SQLite export."),
    run: str | None = typer.Option(None, "--run", help="Link the trace to this run (id, prefix or 'last')."),
    db: Path = DB_OPTION,
    json_out: bool = typer.Option(False, "--json", help="What was imported, as JSON on stdout."),
) -> None:
    """Import a trace (PyTorch profiler JSON or Nsight Systems SQLite) into the store."""
    from infbench.command_support import store_or_exit
    from infbench.store import StoreError
    from probes.traces import import_trace

    with store_or_exit(db) as con:
        try:
            t = import_trace(con, path, run)
        except (TraceError, StoreError) as exc:
            raise fail(str(exc)) from None
    if json_out:
        sys.stdout.write(json.dumps(t.__dict__, indent=2) + "\n")
        return
    c = _console()
    c.print(f"imported {t.source} trace {t.trace_id} from {t.path} into {db}")
    c.print(f"ranks {', '.join(map(str, t.ranks))}; {t.events} events read; "
            + ", ".join(f"{n} {k.removeprefix('trace_')}" for k, n in t.counts.items()))
    if t.run_id:
        c.print(f"linked to run {t.run_id}")
    for note in t.notes:
        c.print(f"note: {note}")
    c.print(f"next: infbench trace analyze {t.trace_id} --db {db}")


@app.command("list")
def list_cmd(db: Path = DB_OPTION) -> None:
    """List the traces in a store, newest first."""
    from infbench.command_support import store_or_exit

    with store_or_exit(db, read_only=True) as con:
        rows = con.execute("SELECT trace_id, imported_at, source, ranks, events, run_id, path "
                           "FROM traces ORDER BY imported_at DESC").fetchall()
    t = _table(title=f"traces in {db}")
    t.add_column("trace", no_wrap=True)
    for col in ("imported (UTC)", "source", "ranks", "events", "run", "path"):
        t.add_column(col)
    for tid, at, src, ranks, events, run, path in rows:
        t.add_row(tid, at.strftime("%Y-%m-%d %H:%M:%S"), src, str(ranks), str(events), run or "", path)
    _console().print(t)


def short_name(name: str) -> str:
    """A kernel name without template and call arguments (HTA's shorten_name), for tables:
    `void at::native::foo<float, 4>(int*)` -> `at::native::foo`."""
    if name.startswith(("Memcpy", "Memset", "dma")) or ("<" not in name and "(" not in name):
        return name
    stack: list[str] = []
    for ch in name.replace("->", ""):
        if ch in ">)":
            opener = "<" if ch == ">" else "("
            while stack and stack[-1] != opener:
                stack.pop()
            if stack:
                stack.pop()
        else:
            stack.append(ch)
    return "".join(stack).split(" ")[-1] or name


def _fmt(v: Any) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, float):
        return f"{v:,.2f}" if abs(v) < 1e4 else f"{v:,.0f}"
    return str(v)


@app.command("analyze")
def analyze(
    trace: str = typer.Argument("last", help="Trace id, unique prefix, 'last', or a linked run id; "
                                "or a Kineto trace file / rank directory, analysed in memory "
                                "without importing it (HTA's breakdowns only, no --sql)."),
    db: Path = DB_OPTION,
    only: str | None = typer.Option(None, help=f"Comma-separated analyses: {', '.join(ANALYSES)}."),
    top: int = typer.Option(10, help="Kernels shown per rank and type before 'others'."),
    json_out: bool = typer.Option(False, "--json", help="All results as JSON on stdout."),
    sql: bool = typer.Option(False, "--sql", help="Print the SQL behind each table."),
) -> None:
    """Timeline analysis of an imported trace: idle/compute breakdown, idle causes per stream,
    kernel types and top kernels, comm/compute overlap, launch delays, CPU-bound steps.
    Given a Kineto file or rank directory instead, HTA's breakdowns of it, in memory."""
    names = [n.strip() for n in only.split(",")] if only else [a for a in ANALYSES if a != "cpu_steps"]
    unknown = [n for n in names if n not in ANALYSES]
    if unknown:
        raise fail(f"--only: unknown analysis {unknown[0]!r} (expected {', '.join(ANALYSES)})")
    if top < 1:
        raise fail("--top must be >= 1")
    results: dict[str, tuple[list[str], list[tuple[Any, ...]], str | None]] = {}
    if trace != "last" and Path(trace).exists():
        from probes.traces.frame import ANALYSES as IN_MEMORY
        from probes.traces.frame import TraceFrame

        label = f"{trace} (in memory, not imported)"
        names = names if only else list(IN_MEMORY)
        if sql:
            raise fail(f"--sql: {trace} is analysed in memory, without SQL; import it "
                       "(`infbench trace import`) to see the SQL behind each table")
        stored_only = [n for n in names if n not in IN_MEMORY]
        if stored_only:
            raise fail(f"--only: {stored_only[0]!r} needs the trace imported (`infbench trace "
                       f"import`); a file is analysed in memory for {', '.join(IN_MEMORY)}")
        try:
            frame = TraceFrame.read(trace)
            for n in names:
                results[n] = (*frame.query(n, **({"num_kernels": top} if n == "kernels" else {})), None)
        except TraceError as exc:
            raise fail(str(exc)) from None
        trace_id = None
    else:
        from infbench.command_support import store_or_exit
        from probes.traces.analysis import Timeline

        with store_or_exit(db, read_only=True) as con:
            try:
                with Timeline(con, trace) as tl:
                    trace_id = label = tl.trace_id
                    if tl.cpu_only and not only:
                        names = ["cpu_steps"]  # what a CPU-only profile (no GPU events) can say
                    for n in names:
                        results[n] = tl.query(n, **({"num_kernels": top} if n == "kernels" else {}))
            except TraceError as exc:
                raise fail(str(exc)) from None
    if json_out:
        out = {"trace_id": trace_id, **({} if trace_id else {"path": trace}), **{n: [dict(zip(c, r, strict=True)) for r in rows]
                                         for n, (c, rows, _) in results.items()}}
        sys.stdout.write(json.dumps(out, indent=2, default=str).replace("NaN", "null") + "\n")
        return
    head = f"trace {label}" + (" (CPU-only profile: no GPU events; per-step CPU "
                               "ops only)" if names == ["cpu_steps"] else "")
    tables = []
    for n, (cols, rows, text) in results.items():
        name_at = cols.index("name") if "name" in cols else -1
        cells = [[short_name(v) if i == name_at else _fmt(v) for i, v in enumerate(r)] for r in rows]
        tables.append((_TITLES[n], cols, cells, text if sql else None))
    if not sys.stdout.isatty():
        # Piped to a file or a log: plain columns, one row per line, and no rich to import
        # or lay out (a tenth of a second of a whole `trace analyze FILE`).
        from infbench.console import plain_table

        sys.stdout.write(head + "\n" + "".join(
            plain_table(title, cols, cells) + (f"{text}\n" if text else "")
            for title, cols, cells, text in tables))
        return
    console = _console()
    console.print(head)
    for title, cols, cells, text in tables:
        t = _table(title=title, title_justify="left")
        for col in cols:
            t.add_column(col, overflow="fold")
        for row in cells:
            t.add_row(*row)
        console.print(t)
        if text:
            console.print(text)
