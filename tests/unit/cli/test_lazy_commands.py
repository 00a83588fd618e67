"""`infbench --help` and `version` import no command stack; each listed help line is the
command's own; every command still runs with its real options."""

from __future__ import annotations

import subprocess
import sys

import pytest
import typer

from infbench.cli import COMMANDS, app
from tests.support.cli import ROOT, cli_env

HEAVY = ("duckdb", "numpy", "pyarrow", "aiohttp", "infbench.store", "infbench.loadgen")


@pytest.mark.parametrize("argv", [["--help"], ["version"], []])
def test_top_level_help_and_version_import_no_command_stack(argv: list[str]) -> None:
    code = ("import sys\nfrom infbench.cli import main\nsys.argv = ['infbench', *sys.argv[1:]]\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            f"print([m for m in {HEAVY!r} if m in sys.modules])")
    r = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True,
                       env=cli_env(), cwd=ROOT, timeout=60)
    assert r.stdout.strip().splitlines()[-1] == "[]", r.stdout + r.stderr


@pytest.mark.parametrize("lazy", COMMANDS, ids=[c.name for c in COMMANDS])
def test_listed_help_is_how_the_commands_own_help_begins(lazy) -> None:
    import importlib

    obj = getattr(importlib.import_module(lazy.module), lazy.attr)
    own = obj.info.help if isinstance(obj, typer.Typer) else obj.__doc__
    assert " ".join(own.split()).startswith(lazy.help)


def test_every_command_is_reachable_with_its_real_options() -> None:
    from typer.testing import CliRunner

    runner = CliRunner()
    for lazy in COMMANDS:
        if lazy.name == "engine":
            continue  # hands its arguments to `python -m reference_engine` (tested end to end)
        r = runner.invoke(app, [lazy.name, "--help"])
        assert r.exit_code == 0, (lazy.name, r.output)
        assert "Usage: " in r.output and lazy.name in r.output
    assert runner.invoke(app, ["no-such-command"]).exit_code == 2


def test_every_subcommand_of_every_group_is_reachable_by_its_name() -> None:
    import importlib

    from typer.testing import CliRunner

    runner = CliRunner()
    for lazy in COMMANDS:
        obj = getattr(importlib.import_module(lazy.module), lazy.attr)
        if not isinstance(obj, typer.Typer) or lazy.name == "engine":
            continue
        for cmd in obj.registered_commands:
            name = cmd.name or cmd.callback.__name__.replace("_", "-")
            r = runner.invoke(app, [lazy.name, name, "--help"])
            assert r.exit_code == 0 and "Usage:" in r.output, (lazy.name, name, r.output)


def test_engine_serve_hands_its_arguments_to_the_engine() -> None:
    r = subprocess.run([sys.executable, "-m", "infbench", "engine", "serve", "--port", "not-a-port"],
                       capture_output=True, text=True, env=cli_env(), cwd=ROOT, timeout=60)
    assert r.returncode == 2
    assert "--port: invalid int value: 'not-a-port'" in r.stderr  # argparse of the engine itself
    assert "unrecognized arguments" not in r.stderr
