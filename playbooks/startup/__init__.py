"""Playbook `startup`: an engine's start-up log beside `infbench plan memory`'s arithmetic.
Runbook: playbooks/startup/startup.md.

Modules: `budget` (the stored log, its setup and figures, the arithmetic for the same setup),
`outcome` (the started / incomplete findings, and what a log cannot tell), `playbook`
(findings). The log is imported by `probes.startup_log` first.
"""

from playbooks.startup.playbook import StartupOptions, diagnose_startup

__all__ = ["StartupOptions", "diagnose_startup"]
