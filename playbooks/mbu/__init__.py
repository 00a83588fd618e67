"""Playbook `mbu`: decode memory-bandwidth utilisation computed correctly from the engine's
step log (and a linked trace), the missing share in buckets, and which dashboard mistake
explains a reported figure. Runbook: playbooks/mbu/mbu.md.

Modules: `setup` (engine setup and the bytes of a step), `steps` (decode steps and their
contexts), `compute` (MBU and step-log buckets), `trace` (buckets measured in a trace),
`mistakes` (the dashboard-mistake classifier), `playbook` (findings).
"""

from playbooks.mbu.playbook import MbuOptions, diagnose_mbu

__all__ = ["MbuOptions", "diagnose_mbu"]
