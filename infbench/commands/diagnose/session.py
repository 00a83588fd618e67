"""The path every playbook verb shares: open the store, diagnose, keep the findings with the
run, show them (or JSON)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import duckdb
import typer

from infbench.command_support import fail
from infbench.commands.diagnose.show import print_diagnosis
from infbench.console import make_console, print_warning
from infbench.store import StoreError, open_store
from infbench.store.findings import save_diagnosis
from playbooks import Diagnosis

T = TypeVar("T")

# The options every playbook verb takes, declared once.
DB = typer.Option(Path("infbench.duckdb"), help="Store file (DuckDB).")
JSON_OUT = typer.Option(False, "--json", help="The diagnosis as JSON on stdout.")
SQL = typer.Option(False, "--sql", help="Show the SQL behind each piece of evidence.")
SAVE = typer.Option(True, "--save/--no-save", help="Keep the findings in the store "
                    "with the run (replacing this playbook's earlier ones).")


def validated(options: Any) -> Any:
    """A playbook's options, or exit 2 with what is wrong with them in one line."""
    try:
        options.validate()
    except ValueError as exc:
        raise fail(str(exc)) from None
    return options


def open_for(db: Path, save: bool) -> tuple[duckdb.DuckDBPyConnection, str | None]:
    """Writable when saving (an older file is migrated); a store that cannot be opened for
    writing is still diagnosed read-only, and the reason it will not be saved comes back.
    The caller owns and closes the connection."""
    if not save or not db.exists():  # a missing file must not be created by a diagnosis
        return open_store(db, read_only=True), None
    try:
        return open_store(db), None
    except StoreError as exc:
        return open_store(db, read_only=True), str(exc)


def diagnose_and_save(run: Callable[[duckdb.DuckDBPyConnection], T],
                      to_save: Callable[[T], list[Diagnosis]], db: Path,
                      save: bool) -> tuple[T, int | None, str | None]:
    """Diagnose, and keep the diagnoses `to_save` picks from the result with the run unless told
    not to: (result, findings saved or None, why nothing was saved or None). A store that
    cannot be written is still diagnosed; bad input exits 2 with one line."""
    saved: int | None = None
    try:
        con, not_saved = open_for(db, save)
        try:
            result = run(con)
            if save and not_saved is None:
                try:
                    saved = sum(save_diagnosis(con, d.to_dict()) for d in to_save(result))
                except StoreError as exc:
                    saved, not_saved = None, str(exc)
        finally:
            con.close()
    except (StoreError, ValueError) as exc:
        raise fail(str(exc)) from None
    return result, saved, not_saved


def run_playbook(run: Callable[[duckdb.DuckDBPyConnection], Diagnosis], db: Path, save: bool,
                  json_out: bool, sql: bool, *, report_hint: bool) -> None:
    """Diagnose, keep the findings with the run unless told not to (a store that cannot be
    written is still diagnosed, with a warning), then show them."""
    diag, saved, not_saved = diagnose_and_save(run, lambda d: [d], db, save)
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
