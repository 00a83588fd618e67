"""Terminal output that prints what it is given: no markup, emoji codes or highlighting applied
to text that came from the user (paths, run ids, option values, server messages).

rich renders `:100:` as an emoji and `[x]` as a style by default, which mangles an error that
echoes `uniform:100:10`. Styles are applied only to our own fixed words.

rich is imported where it is used: a command whose output goes to a pipe (`plain_table`)
need not pay for it at start-up.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console


def make_console(stderr: bool = False) -> Console:
    from rich.console import Console

    return Console(stderr=stderr, emoji=False, highlight=False, soft_wrap=True)


def print_error(message: str) -> None:
    from rich.text import Text

    make_console(stderr=True).print(Text.assemble(("error:", "bold red"), " ", message))


def print_warning(message: str, console: Console | None = None) -> None:
    from rich.text import Text

    (console or make_console(stderr=True)).print(Text.assemble(("warning:", "yellow"), " ", message))


def plain_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A table as plain text for a pipe or a log: the title, then left-aligned columns two
    spaces apart, one row per line however long (grep and awk read it; no box characters)."""
    widths = [max([len(c), *(len(r[i]) for r in rows)]) for i, c in enumerate(columns)]
    lines = [title, "  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join(lines) + "\n"
