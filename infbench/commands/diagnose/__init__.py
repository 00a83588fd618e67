"""`infbench diagnose <playbook> RUN`: run a playbook over a recorded run, print its findings
and keep them in the store with the run (for `infbench report` and `infbench export`).

One module per verb family, wired here in the order `--help` lists them; `session` is the
open-diagnose-save-show path they all share, `show` the terminal rendering."""

from __future__ import annotations

import typer

from infbench.commands.diagnose import hang, memory, verbs
from infbench.commands.diagnose.show import print_diagnosis

app = typer.Typer(help="Diagnose a recorded run with a playbook (runbooks: playbooks/*/*.md).",
                  no_args_is_help=True, add_completion=False)


@app.callback()
def _playbooks() -> None:
    # Typer turns an app with a single command into that command; this keeps `diagnose` a
    # group, so `infbench diagnose stalls RUN` stays the spelling as playbooks are added.
    pass


for _name, _verb in (("stalls", verbs.stalls), ("mbu", verbs.mbu), ("replicas", verbs.replicas),
                     ("startup", verbs.startup), ("memory", memory.memory), ("hang", hang.hang)):
    app.command(_name)(_verb)

__all__ = ["app", "print_diagnosis"]
