"""Terminal output that prints what it is given: no markup, emoji codes or highlighting applied
to text that came from the user (paths, run ids, option values, server messages).

rich renders `:100:` as an emoji and `[x]` as a style by default, which mangles an error that
echoes `uniform:100:10`. Styles are applied only to our own fixed words.
"""

from __future__ import annotations

from rich.console import Console
from rich.text import Text


def make_console(stderr: bool = False) -> Console:
    return Console(stderr=stderr, emoji=False, highlight=False, soft_wrap=True)


def print_error(message: str) -> None:
    make_console(stderr=True).print(Text.assemble(("error:", "bold red"), " ", message))


def print_warning(message: str, console: Console | None = None) -> None:
    (console or make_console(stderr=True)).print(Text.assemble(("warning:", "yellow"), " ", message))
