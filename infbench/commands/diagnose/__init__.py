"""`infbench diagnose <playbook> RUN`: run a playbook over a recorded run, print its findings
and keep them in the store with the run (for `infbench report` and `infbench export`).

The verbs are the registered playbooks (`playbooks/registry.py`), in its order after `all`;
a playbook with options of its own has its verb in a module here (`CUSTOM_VERBS`), the others
are built from the registration (`generic`). `session` is the open-diagnose-save-show path
they all share, `show` the terminal rendering."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import typer
from typer.core import TyperGroup

from infbench.commands.diagnose import dilution, hang, memory, triage, verbs
from infbench.commands.diagnose.generic import build_verb
from infbench.commands.diagnose.show import print_diagnosis
from playbooks.registry import PLAYBOOKS


class _RunOrPlaybook(TyperGroup):
    """`diagnose RUN` is `diagnose all RUN`: a first word that names no playbook is a run."""

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        if args and not args[0].startswith("-") and args[0] not in self.commands:
            args = ["all", *args]
        return super().resolve_command(ctx, args)


app = typer.Typer(help="Diagnose a recorded run: `diagnose RUN` runs every playbook its data "
                       "allow and ranks their findings; `diagnose PLAYBOOK RUN` runs one "
                       "(runbooks: playbooks/*/*.md).",
                  cls=_RunOrPlaybook, no_args_is_help=True, add_completion=False)


@app.callback()
def _playbooks() -> None:
    # Typer turns an app with a single command into that command; this keeps `diagnose` a
    # group, so `infbench diagnose stalls RUN` stays the spelling as playbooks are added.
    pass


# A registered playbook's own verb where it has one (options beyond its options type, a
# capture, an import, a sweep); every other registered playbook gets the built one.
CUSTOM_VERBS: dict[str, Callable[..., None]] = {
    "stalls": verbs.stalls, "mbu": verbs.mbu, "replicas": verbs.replicas, "startup": verbs.startup,
    "memory": memory.memory, "hang": hang.hang, "dilution": dilution.dilution}

app.command("all")(triage.triage)
for _pb in PLAYBOOKS:
    app.command(_pb.command)(CUSTOM_VERBS.get(_pb.command) or build_verb(_pb))

__all__ = ["CUSTOM_VERBS", "app", "print_diagnosis"]
