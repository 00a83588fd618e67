"""Playbook `hang`: from a stored capture of every rank (Flight Recorder dumps and stacks,
`probes.hang`), which rank is behind or mismatched, on which collective, and where every
rank waits (runbook: `hang.md` beside this).

Modules: `load` (the capture from the store), `progress` (sequence ids per rank, the stuck
collective), `matching` (PyTorch's analyzer checks), `waits` (frames), `findings`, `playbook`.
"""

from playbooks.hang.load import resolve_capture
from playbooks.hang.playbook import HangOptions, diagnose_hang

__all__ = ["HangOptions", "diagnose_hang", "resolve_capture"]
