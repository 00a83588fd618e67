"""The CLI's start-up does not import pydantic (typer 0.29 would, for every command: 0.1-0.15 s),
and the plain conversion that replaces typer's pydantic coercion gives every value, default,
environment variable and error exactly as typer's own does."""

from __future__ import annotations

import subprocess
import sys
from enum import Enum
from pathlib import Path
from typing import Literal

import pytest
import typer
import typer.core
from typer.testing import CliRunner

from infbench.cli import COMMANDS
from tests.support.cli import ROOT, cli_env

TRACE = ROOT / "tests" / "fixtures" / "traces" / "hta_alexnet_a100.json.gz"

# In one process: every command's and subcommand's --help, usage errors (unknown command or
# option, missing argument, a store that is not there), `version`, and a real in-memory
# `trace analyze` (the issue-24 path); then the modules that start-up must not have imported.
# (A malformed value, `--top x`, is refused with typer's own message, built by pydantic then.)
STARTUP = r"""
import importlib, sys
import typer
from typer.testing import CliRunner
from infbench.cli import COMMANDS, app
runner = CliRunner()
calls = [["--help"], ["version"], ["no-such-command"],
         ["trace", "analyze", sys.argv[1], "--json"], ["trace", "analyze", sys.argv[1]],
         ["trace", "analyze", sys.argv[1], "--top", "3", "--only", "temporal"],
         ["runs", "--db", "/nonexistent/none.duckdb"], ["show"], ["run", "--no-such-option"]]
for lazy in COMMANDS:
    if lazy.name == "engine":
        continue
    calls.append([lazy.name, "--help"])
    obj = getattr(importlib.import_module(lazy.module), lazy.attr)
    if isinstance(obj, typer.Typer):
        for cmd in obj.registered_commands:
            calls.append([lazy.name, cmd.name or cmd.callback.__name__.replace("_", "-"), "--help"])
codes = [runner.invoke(app, argv).exit_code for argv in calls]
print(sorted(set(codes)))
print([m for m in ("pydantic", "pydantic_core", "typer._adapters") if m in sys.modules])
"""


def test_no_command_imports_pydantic_to_parse_its_options() -> None:
    r = subprocess.run([sys.executable, "-c", STARTUP, str(TRACE)], capture_output=True,
                       text=True, env=cli_env(), cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr
    *_, codes, imported = r.stdout.strip().splitlines()
    assert codes == "[0, 2]", codes  # every help shown, every usage error refused (exit 2)
    assert imported == "[]", f"imported at start-up: {imported}"


@pytest.mark.parametrize("argv", [["--help"], ["version"], ["trace", "analyze", str(TRACE), "--json"]])
def test_the_console_entry_point_imports_no_pydantic(argv: list[str]) -> None:
    code = ("import sys\nfrom infbench.cli import main\nsys.argv = ['infbench', *sys.argv[1:]]\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print([m for m in ('pydantic', 'pydantic_core') if m in sys.modules])")
    r = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True,
                       env=cli_env(), cwd=ROOT, timeout=120)
    assert r.stdout.strip().splitlines()[-1] == "[]", r.stdout[-2000:] + r.stderr


def test_the_shim_is_installed() -> None:
    assert getattr(typer.core.build_runtime_param, "_infbench_plain", False)
    assert len(COMMANDS) > 10


class Color(Enum):
    red = "red"
    blue = "blue"


def _app() -> typer.Typer:
    app = typer.Typer()

    @app.command()
    def cmd(
        name: str = typer.Argument("x"),
        n: int = typer.Option(1),
        f: float = typer.Option(2),
        b: bool = typer.Option(False, envvar="PLAIN_B"),
        p: Path = typer.Option(Path("default")),
        ex: Path | None = typer.Option(None, exists=True, dir_okay=False),
        color: Color = typer.Option(Color.red, case_sensitive=False),
        lit: Literal["a", "b"] = typer.Option("a"),
        words: list[str] = typer.Option([]),
        paths: list[Path] = typer.Option([]),
        nums: list[int] = typer.Option([]),
        key: str = typer.Option("", envvar="PLAIN_KEY"),
        opt: str | None = typer.Option(None),
        count: int = typer.Option(0, "-v", count=True),
        bounded: int = typer.Option(1, min=0, max=5),  # not plain: typer's own coercion
    ) -> None:
        vals = [name, n, f, b, p, ex, color, lit, words, paths, nums, key, opt, count, bounded]
        typer.echo(repr([(type(v).__name__, v) for v in vals]))

    return app


CASES = [
    [], ["y"], ["--n", "007"], ["--n", "+5"], ["--n", "-0"], ["--n", " 5"], ["--n", "1_0"],
    ["--n", "x"], ["--n", "3.5"], ["--n", ""], ["--n", "12345678901234567890"], ["--n", "٣"],
    ["--f", "1"], ["--f", "1.5"], ["--f", ".5"], ["--f", "5."], ["--f", "-1e3"], ["--f", "nan"],
    ["--f", "inf"], ["--f", "x"], ["--f", "1_0"], ["--f", " 2"], ["--f", "0.1000000000000000055511151231257827"],
    ["--f", "1e400"], ["--b"], ["--no-b"], ["--p", "a//b/"], ["--p", "-"], ["--p", ""], ["--p", "a\0b"],
    ["--ex", "/nonexistent/file"], ["--ex", "."], ["--ex", __file__], ["--ex", ".//" + Path(__file__).name],
    ["--color", "BLUE"], ["--color", "green"], ["--lit", "b"], ["--lit", "c"],
    ["--words", "a", "--words", "b"], ["--paths", "x//y", "--paths", "-"], ["--nums", "1", "--nums", "z"],
    ["--opt", "v"], ["-vvv"], ["--bounded", "4"], ["--bounded", "9"], ["--bounded", "q"],
]


@pytest.mark.parametrize("argv", CASES, ids=[" ".join(c) or "defaults" for c in CASES])
@pytest.mark.parametrize("env", [{}, {"PLAIN_B": "yes", "PLAIN_KEY": "k"}, {"PLAIN_B": "maybe"}],
                         ids=["no-env", "env", "bad-env"])
def test_plain_conversion_is_typers_own(argv: list[str], env: dict[str, str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from typer._coercion import build_runtime_param as typers_own

    runner = CliRunner()
    ours = runner.invoke(_app(), argv, env=env)
    with monkeypatch.context() as m:
        m.setattr(typer.core, "build_runtime_param", typers_own)
        theirs = runner.invoke(_app(), argv, env=env)
    assert (ours.exit_code, ours.output) == (theirs.exit_code, theirs.output)
    assert type(ours.exception) is type(theirs.exception)
