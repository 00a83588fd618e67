"""The `infbench` command: wires the verb groups together and holds no logic."""

from __future__ import annotations

import typer

from infbench import __version__
from infbench.commands import engine, plan

app = typer.Typer(
    help="Benchmark and diagnose LLM inference endpoints.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(engine.app, name="engine")
app.add_typer(plan.app, name="plan")


@app.command("version")
def version() -> None:
    """Print the infbench version."""
    typer.echo(__version__)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
