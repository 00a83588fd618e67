"""`infbench diagnose <playbook> RUN`: run a playbook over a recorded run, print its findings
and keep them in the store with the run (for `infbench report` and `infbench export`).

One module per verb family; they register on the group in `_app`, and `session` is the
open-diagnose-save-show path they all share."""

from __future__ import annotations

from infbench.commands.diagnose import hang, memory, verbs
from infbench.commands.diagnose._app import app
from infbench.commands.diagnose.show import print_diagnosis

__all__ = ["app", "hang", "memory", "print_diagnosis", "verbs"]
