"""Playbook `memory`: the memory ledger of a run. Runbook: playbooks/memory/memory.md.

Modules: `stats` (least squares with an interval), `growth` (fixed vs growing components,
bytes per finished request, suspects), `exhaustion` (KV pool filled, preemptions, prompts vs
outputs, the concurrency cap and its test by sweep), `playbook` (findings).
"""

from playbooks.memory.playbook import MemoryOptions, diagnose_memory

__all__ = ["MemoryOptions", "diagnose_memory"]
