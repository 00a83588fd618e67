"""Command groups that load their module only when the command runs.

`infbench --help` and `infbench version` must answer at once, but every command module pulls
in its stack (DuckDB, Arrow, NumPy, aiohttp): importing them all costs a second before any
output. Each command is listed here by name, module and one-line help; the module is imported
when that command is invoked (or its own `--help` is asked for). A test checks that each line
here is how the command's own help begins, so the two cannot drift.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

import typer
from typer import _click as click
from typer._click.exceptions import NoArgsIsHelpError, UsageError
from typer.core import TyperCommand, TyperGroup


def _group() -> None:
    pass


@dataclass(frozen=True)
class Lazy:
    name: str
    module: str
    attr: str  # a typer.Typer (a verb group) or a function (one command)
    help: str

    def load(self) -> click.Command:
        obj = getattr(importlib.import_module(self.module), self.attr)
        if isinstance(obj, typer.Typer):
            if obj.registered_callback is None:
                # typer turns a group with one command and no callback into that command, so
                # `infbench engine serve` would lose its `serve`: a callback keeps it a group.
                obj.callback()(_group)
            cmd = typer.main.get_command(obj)
        else:
            single = typer.Typer()
            single.command(self.name)(obj)
            cmd = typer.main.get_command(single)
        cmd.name = self.name
        return cmd


class LazyCommand(TyperCommand):
    """Stands in for the real command in listings; everything else is the real one's."""

    def __init__(self, lazy: Lazy) -> None:
        super().__init__(name=lazy.name, help=lazy.help, short_help=lazy.help)
        self._lazy = lazy
        self._real: click.Command | None = None

    @property
    def real(self) -> click.Command:
        if self._real is None:
            self._real = self._lazy.load()
        return self._real

    def make_context(self, info_name: str | None, args: list[str], parent: Any = None,
                     **extra: Any) -> Any:
        return self.real.make_context(info_name, args, parent=parent, **extra)

    def invoke(self, ctx: Any) -> Any:
        return self.real.invoke(ctx)

    def get_params(self, ctx: Any) -> list[Any]:
        return self.real.get_params(ctx)

    def shell_complete(self, ctx: Any, incomplete: str) -> list[Any]:
        return self.real.shell_complete(ctx, incomplete)


def usage_error_in_one_line(exc: UsageError, ctx: Any) -> typer.Exit:
    """A usage error (unknown option, bad value, missing argument) as one line on stderr."""
    from infbench.console import print_error

    where = (exc.ctx or ctx).command_path
    message = " ".join(exc.format_message().split())
    print_error(f"{where}: {message} (see {where} --help)")
    return typer.Exit(2)


def lazy_group(commands: list[Lazy]) -> type[TyperGroup]:
    by_name = {c.name: c for c in commands}

    class LazyGroup(TyperGroup):
        def invoke(self, ctx: Any) -> Any:
            # Subcommands parse their options inside this call, so their usage errors land here.
            try:
                return super().invoke(ctx)
            except NoArgsIsHelpError:
                raise  # `infbench gate` alone: the help, as asked
            except UsageError as exc:
                raise usage_error_in_one_line(exc, ctx) from None

        def list_commands(self, ctx: Any) -> list[str]:
            return [*super().list_commands(ctx), *by_name]

        def get_command(self, ctx: Any, cmd_name: str) -> click.Command | None:
            if cmd_name in by_name:
                return LazyCommand(by_name[cmd_name])
            return super().get_command(ctx, cmd_name)

    return LazyGroup
