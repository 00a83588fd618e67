"""The `infbench diagnose` group; each playbook's verb registers itself on it."""

from __future__ import annotations

import typer

app = typer.Typer(help="Diagnose a recorded run with a playbook (runbooks: playbooks/*/*.md).",
                  no_args_is_help=True, add_completion=False)


@app.callback()
def _playbooks() -> None:
    # Typer turns an app with a single command into that command; this keeps `diagnose` a
    # group, so `infbench diagnose stalls RUN` stays the spelling as playbooks are added.
    pass
