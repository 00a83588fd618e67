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
from typing import TYPE_CHECKING

import typer

from infbench.console import print_error
from infbench.exit_codes import USAGE

if TYPE_CHECKING:
    import duckdb


def one_line(message: str) -> str:
    """The message as the one line a refusal is: a line break inside it (in a path or run id
    the user typed, or a parser's second line) is written as the two characters `\\n`, so
    nothing after it is cut off and nothing starts a second line."""
    return message.strip().replace("\r", "\\r").replace("\n", "\\n")


def fail(message: str, code: int = USAGE) -> typer.Exit:
    """Print the message as one error line (`one_line`); return the Exit for the caller to
    raise. The one refusal of every command: exit 2 (`USAGE`) for bad input unless told."""
    print_error(one_line(message))
    return typer.Exit(code)


@contextmanager
def store_or_exit(db: Path, *, read_only: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
    """The store at `db`, closed when the block ends; a store that cannot be opened (missing,
    locked, not an infbench store) is `fail`ed before the block runs.

    Ownership: the connection is this context's; the block must not close or keep it."""
    # Imported here: `fail` alone must not cost a command that never opens the store
    # (`trace analyze FILE`) DuckDB's import.
    from infbench.store import StoreError, open_store

    try:
        con = open_store(db, read_only=read_only)
    except StoreError as exc:
        raise fail(str(exc)) from None
    try:
        yield con
    finally:
        con.close()
