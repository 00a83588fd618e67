"""The `infbench` command: wires the verb groups together and holds no logic."""

from __future__ import annotations

import typer

from infbench import __version__
from infbench.commands import diagnose, engine, plan
from infbench.commands import gate as gate_cmd
from infbench.commands import results as results_cmd
from infbench.commands import run as run_cmd
from infbench.commands import sweep as sweep_cmd
from infbench.exit_codes import SUMMARY as EXIT_CODES
from infbench.exit_codes import error_boundary

app = typer.Typer(
    help=f"Benchmark and diagnose LLM inference endpoints.\n\n{EXIT_CODES}",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(engine.app, name="engine")
app.command("run")(run_cmd.run)
results_cmd.register(app)
app.add_typer(plan.app, name="plan")
app.add_typer(diagnose.app, name="diagnose")
app.command("import")(diagnose.import_cmd)
app.add_typer(gate_cmd.app, name="gate")
app.command("compare")(gate_cmd.compare)
app.command("sweep")(sweep_cmd.sweep)


@app.command("version")
def version() -> None:
    """Print the infbench version."""
    typer.echo(__version__)


def main() -> None:
    with error_boundary():
        app()


if __name__ == "__main__":
    main()
