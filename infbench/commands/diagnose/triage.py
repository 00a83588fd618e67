"""`infbench diagnose RUN` (also `diagnose all RUN`): every playbook the run's data allow,
ranked on one ruler, with one headline. Exit codes: 0 nothing above info, 1 a warning or
worse stands, 2 bad input."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from infbench.command_support import fail
from infbench.commands.diagnose.session import DB, JSON_OUT, SAVE, SQL, diagnose_and_save
from infbench.console import make_console, print_warning
from infbench.report.triage import to_markdown, to_text
from playbooks.triage import TriageOptions, diagnose_all


def triage(
    run_id: str = typer.Argument(..., help="Run id, unique prefix, or 'last'."),
    db: Path = DB,
    json_out: bool = JSON_OUT,
    markdown: Path | None = typer.Option(None, "--markdown", help="Also write the triage as "
                                         "Markdown (for an incident ticket) to this file."),
    min_stall: float = typer.Option(50.0, "--min-stall", help="Smallest gap (ms) counted as a stall."),
    sql: bool = SQL,
    save: bool = SAVE,
) -> None:
    """Every playbook the run's data allow, one ranked list and one headline: the cause that
    owns most of the run's p99 tail. Exit 0 when nothing is above info, 1 when a warning or
    worse stands, 2 on bad input."""
    options = TriageOptions(min_stall_ms=min_stall, db=str(db))
    try:
        options.validate()
    except ValueError as exc:
        raise fail(str(exc)) from None
    result, _, not_saved = diagnose_and_save(lambda con: diagnose_all(con, run_id, options),
                                             lambda r: [*r.per_playbook, r.diagnosis], db, save)
    doc = result.diagnosis.to_dict()
    if markdown is not None:
        try:
            markdown.write_text(to_markdown(doc), encoding="utf-8")
        except OSError as exc:
            raise fail(f"--markdown: cannot write {markdown} ({exc.strerror or exc})") from None
    if not_saved is not None:
        print_warning(f"triage done but not saved: {not_saved.splitlines()[0]}")
    if json_out:
        sys.stdout.write(json.dumps(doc, indent=2, default=str) + "\n")
    else:
        make_console().print(to_text(doc, sql), markup=False, highlight=False, end="")
    raise typer.Exit(result.exit_code)
