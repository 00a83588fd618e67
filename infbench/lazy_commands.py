"""Command groups that load their module only when the command runs.

`infbench --help` and `infbench version` must answer at once, but every command module pulls
in its stack (DuckDB, Arrow, NumPy, aiohttp): importing them all costs a second before any
output. Each command is listed here by name, module and one-line help; the module is imported
when that command is invoked (or its own `--help` is asked for). A test checks that each line
here is how the command's own help begins, so the two cannot drift.

`plain_coercion` keeps pydantic out of the parse: see there.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args, get_origin

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


def usage_error_in_one_line(exc: Exception, ctx: Any) -> typer.Exit:
    """A usage error (unknown option, bad value, missing argument: click's UsageError, from
    whichever copy of click raised it) as one line on stderr, its whitespace collapsed."""
    from infbench.command_support import fail

    where = (getattr(exc, "ctx", None) or ctx).command_path
    message = " ".join(getattr(exc, "format_message", exc.__str__)().split())
    return fail(f"{where}: {message} (see {where} --help)")


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


# typer 0.29 coerces every parameter through a pydantic TypeAdapter, built the first time the
# parameter is processed: even the root group's unset `--help` (value None, returned as is)
# builds one, so every command paid for importing pydantic (0.1-0.15 s) before it ran.
# typer has no option for another coercion, so `plain_coercion` swaps the one function that
# builds a parameter's coercion (`typer.core.build_runtime_param`, which typer calls lazily for
# each parameter) for one that, for the annotations infbench's commands use (str, int, float,
# bool, Path, their lists, enums and literals, with no parser, bounds or file opening), returns
# a plain conversion. It converts only values whose result is certain to equal pydantic's (a
# str to str, an ASCII integer literal to int, an ASCII decimal literal to float, a str to
# Path, a value that is already of the type); anything else (a malformed number, a bad path,
# a bytes value) is handed to typer's own pydantic coercion, built then, so every result and
# every error message stays typer's. Any other annotation gets typer's coercion unchanged.

_INT = r"[+-]?[0-9]+"  # compiled when a number is first converted (re caches it)
_FLOAT = r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"


class _Defer(Exception):
    """The plain conversion is not certain for this value: typer's pydantic one decides."""


def _plain_leaf(annotation: Any, info: Any) -> Callable[[Any, Any, Any], Any] | None:
    """A conversion (value, param, ctx) -> value for one plain annotation, or None."""
    from typer._param_types import (
        choice_coercion_annotation,
        coerce_cli_choice,
        coerce_cli_path,
        routes_to_path,
    )

    if info.parser is not None:
        return None
    if annotation is str:
        def to_str(value: Any, param: Any, ctx: Any) -> Any:
            if type(value) is str:
                return value
            raise _Defer
        return to_str
    if annotation is bool:
        def to_bool(value: Any, param: Any, ctx: Any) -> Any:
            if type(value) is bool:
                return value
            raise _Defer
        return to_bool
    if annotation in (int, float):
        if info.min is not None or info.max is not None or info.clamp:
            return None
        pattern = _INT if annotation is int else _FLOAT

        def to_number(value: Any, param: Any, ctx: Any) -> Any:
            if type(value) is annotation:
                return value
            if annotation is float and type(value) is int:
                return float(value)
            if type(value) is str and re.fullmatch(pattern, value):
                return annotation(value)
            raise _Defer
        return to_number
    choice = choice_coercion_annotation(annotation, info)  # an Enum or a Literal
    if choice is not None:
        choices, case_sensitive = choice

        def to_choice(value: Any, param: Any, ctx: Any) -> Any:
            try:
                return coerce_cli_choice(value, choices=choices,
                                         case_sensitive=case_sensitive, ctx=ctx)
            except Exception:  # not among the choices: typer's message
                raise _Defer from None
        return to_choice
    if isinstance(annotation, type) and issubclass(annotation, Path) \
            and routes_to_path(annotation, info) and info.path_type in (None, annotation):
        def to_path(value: Any, param: Any, ctx: Any) -> Any:
            if type(value) is not str and not isinstance(value, annotation):
                raise _Defer
            # pydantic's Path from a str is Path(str); the checks that follow are typer's own.
            # Their messages quote the value as given (and a NUL byte fails inside pydantic),
            # so any refusal is left to typer.
            try:
                return coerce_cli_path(annotation(value), info, path_type=annotation,
                                       param=param, ctx=ctx)
            except Exception:
                raise _Defer from None
        return to_path
    return None


def _plain_converter(annotation: Any, info: Any) -> Callable[[Any, Any, Any], Any] | None:
    if get_origin(annotation) is list:
        (item,) = get_args(annotation)
        leaf = _plain_leaf(item, info)
        if leaf is None:
            return None

        def to_list(value: Any, param: Any, ctx: Any) -> Any:
            items = value if isinstance(value, list | tuple) else [value]
            return [leaf(v, param, ctx) for v in items]
        return to_list
    return _plain_leaf(annotation, info)


def _plain_runtime_param_class() -> type:
    from typer._coercion import RuntimeParam

    @dataclass(frozen=True)
    class PlainRuntimeParam(RuntimeParam):
        convert: Callable[[Any, Any, Any], Any]
        typers: Callable[[], Any]  # typer's own coercion of the parameter, built on first use

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            try:
                return self.convert(value, param, ctx)
            except _Defer:
                return self.typers()._coerce_value(value, param=param, ctx=ctx)

    return PlainRuntimeParam


def plain_coercion() -> bool:
    """Give typer's parameters of plain types a plain conversion (see above); idempotent.
    False, and typer left as it is, where typer's internals are not the ones this knows."""
    import typer.core

    typers_build = getattr(typer.core, "build_runtime_param", None)
    if typers_build is None or not hasattr(typer.core._TyperParameter, "get_runtime_param"):
        return False
    if getattr(typers_build, "_infbench_plain", False):
        return True
    try:
        plain_class = _plain_runtime_param_class()
    except (ImportError, TypeError):
        return False

    def build_runtime_param(descriptor: Any) -> Any:
        convert = None
        if descriptor.file_annotation is None:
            convert = _plain_converter(descriptor.annotation, descriptor.parameter_info)
        if convert is None:
            return typers_build(descriptor)
        built: list[Any] = []

        def typers() -> Any:
            if not built:
                built.append(typers_build(descriptor))
            return built[0]

        return plain_class(parameter_info=descriptor.parameter_info,
                           annotation=descriptor.annotation, convert=convert, typers=typers)

    build_runtime_param._infbench_plain = True  # type: ignore[attr-defined]  # a mark on the function, so patching twice is seen
    typer.core.build_runtime_param = build_runtime_param
    return True
