"""The verb of a registered playbook that needs no verb of its own: `infbench diagnose VERB
RUN` with --db, --json, then one option per field its options type offers to the CLI
(`playbooks.registry.cli_fields`), then --sql and --save."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from infbench.commands.diagnose.session import DB, JSON_OUT, SAVE, SQL, run_playbook, validated
from playbooks.registry import Playbook, cli_fields


def build_verb(pb: Playbook) -> Callable[..., None]:
    """A Typer command for `pb`: its signature is built from the registration, so the help
    lists the options in the order given above."""
    offered = cli_fields(pb.options)
    taken = {"run_id", "db", "json_out", "sql", "save"} & {f.name for f in offered}
    if taken:
        raise ValueError(f"{pb.name}: option field(s) {', '.join(sorted(taken))} clash with "
                         "the verb's own parameters")
    P = inspect.Parameter
    params = [P("run_id", P.POSITIONAL_OR_KEYWORD, annotation=str,
                default=typer.Argument(..., help=pb.argument_help)),
              P("db", P.POSITIONAL_OR_KEYWORD, annotation=Path, default=DB),
              P("json_out", P.POSITIONAL_OR_KEYWORD, annotation=bool, default=JSON_OUT)]
    params += [P(f.name, P.POSITIONAL_OR_KEYWORD, annotation=f.type,
                 default=typer.Option(f.default, f.flag, help=f.help)) for f in offered]
    params += [P("sql", P.POSITIONAL_OR_KEYWORD, annotation=bool, default=SQL),
               P("save", P.POSITIONAL_OR_KEYWORD, annotation=bool, default=SAVE)]

    def verb(run_id: str, db: Path, json_out: bool, sql: bool, save: bool, **values: Any) -> None:
        options = validated(pb.options(**values))
        run_playbook(lambda con: pb.diagnose(con, run_id, options), db, save, json_out, sql,
                     report_hint=False)

    verb.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]  # Typer reads the built signature
    verb.__annotations__ = {p.name: p.annotation for p in params}
    verb.__doc__ = pb.help
    verb.__name__ = verb.__qualname__ = pb.command
    return verb
