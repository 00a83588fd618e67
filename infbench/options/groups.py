"""Option groups for typer commands: a frozen dataclass per group whose fields declare their
command-line option, and `grouped`, which lets a command take whole groups as parameters.

typer reads a command's options from its signature, one parameter each, so two commands that
take the same fifty options would each list all fifty. Here a command names the groups it
takes (`target: TargetOptions`), `grouped` hands typer the groups' fields as the options (same
names, defaults, help), and the command receives each group built from the values given. A
group's field keeps a real default, so a group is also built directly (tests, library calls).

A command that needs another help text or default for a field subclasses the group and
redeclares that field; the field keeps its place.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from copy import copy
from dataclasses import Field, dataclass, field, fields
from typing import Any, ClassVar, get_type_hints

import typer

_OPTION = "infbench.option"


def option(default: Any, *decls: str, **kw: Any) -> Any:
    """A group field and its command-line option: `typer.Option(default, *decls, **kw)`.

    Typed Any so that `url: list[str] = option([], help=...)` reads as the field's type."""
    info = typer.Option(default, *decls, **kw)
    if isinstance(default, list):  # a mutable default: each group gets its own list
        return field(default_factory=lambda: list(default), metadata={_OPTION: info})
    return field(default=default, metadata={_OPTION: info})


@dataclass(frozen=True)
class OptionGroup:
    """Base of a group: subclasses are frozen dataclasses whose fields are `option(...)`s.

    PANEL names the group's section in the command's --help."""

    PANEL: ClassVar[str] = "Options"

    @classmethod
    def parameters(cls) -> list[inspect.Parameter]:
        """The group's options as keyword parameters, in field order, types resolved."""
        hints = get_type_hints(cls)
        params = []
        for f in fields(cls):
            info = _option_of(f)
            if info is None:
                continue
            info = copy(info)
            info.rich_help_panel = cls.PANEL
            params.append(inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY,
                                            default=info, annotation=hints[f.name]))
        return params

    @classmethod
    def take(cls, values: dict[str, Any]) -> OptionGroup:
        """The group built from a command's parsed values (only its own fields are read)."""
        return cls(**{f.name: values[f.name] for f in fields(cls) if f.name in values})


def _option_of(f: Field[Any]) -> Any:
    return f.metadata.get(_OPTION)


def grouped(func: Callable[..., Any]) -> Callable[..., None]:
    """`func` as typer should see it: each parameter typed with an OptionGroup is replaced by
    that group's options; the other parameters stay as declared. When typer calls the result,
    `func` gets each group built from its options' values."""
    hints = get_type_hints(func)
    params: list[inspect.Parameter] = []
    groups: dict[str, type[OptionGroup]] = {}
    own: list[str] = []
    for p in inspect.signature(func).parameters.values():
        kind = hints.get(p.name)
        if isinstance(kind, type) and issubclass(kind, OptionGroup):
            groups[p.name] = kind
            params.extend(kind.parameters())
        else:
            own.append(p.name)
            params.append(p.replace(kind=inspect.Parameter.KEYWORD_ONLY, annotation=kind))
    names = [p.name for p in params]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:  # a programming error: two groups would fill one option
        raise TypeError(f"{func.__name__}: options declared twice: {', '.join(twice)}")

    def command(**values: Any) -> None:
        func(**{name: group.take(values) for name, group in groups.items()},
             **{name: values[name] for name in own})

    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]  # typer reads it
    command.__annotations__ = {p.name: p.annotation for p in params}
    for attr in ("__name__", "__qualname__", "__module__", "__doc__"):
        setattr(command, attr, getattr(func, attr))
    return command

