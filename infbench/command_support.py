"""What the `infbench` commands do the same way: refuse bad input in one line with exit 2,
and open the store so that a bad store file is such a refusal and the connection is closed
however the command's body ends.

Not a command itself: commands may not import each other (import-linter contract "commands
are thin and independent"), so what they share lives here, outside `infbench.commands`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb
import typer

from infbench.console import print_error
from infbench.exit_codes import USAGE
from infbench.store import StoreError, open_store


def fail(message: str, code: int = USAGE) -> typer.Exit:
    """Print the message's first line as an error; return the Exit for the caller to raise.

    Only the first line: a store or parser message may carry a second (a DuckDB hint) that
    would make the refusal more than the one line a user and a CI log expect."""
    print_error(message.splitlines()[0] if message else message)
    return typer.Exit(code)


@contextmanager
def store_or_exit(db: Path, *, read_only: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
    """The store at `db`, closed when the block ends; a store that cannot be opened (missing,
    locked, not an infbench store) is `fail`ed before the block runs.

    Ownership: the connection is this context's; the block must not close or keep it."""
    try:
        con = open_store(db, read_only=read_only)
    except StoreError as exc:
        raise fail(str(exc)) from None
    try:
        yield con
    finally:
        con.close()
