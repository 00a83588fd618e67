"""`infbench engine serve`: start the bundled reference engine.

The engine is its own program (`python -m reference_engine`); this verb hands it the
arguments untouched so both entry points accept exactly the same flags.
"""

from __future__ import annotations

import os
import sys

import typer

app = typer.Typer(help="The bundled reference engine.", no_args_is_help=True)


@app.command(
    "serve",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    add_help_option=False,
)
def serve(ctx: typer.Context) -> None:
    """Serve the reference engine (flags as `python -m reference_engine --help`)."""
    argv = [sys.executable, "-m", "reference_engine", *ctx.args]
    os.execv(sys.executable, argv)
