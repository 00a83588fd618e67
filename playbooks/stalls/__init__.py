"""The stalls playbook: token stalls, their periodicity, prefill interference, head-of-line
blocking, the TTFT split and an engine that stopped (runbook: `stalls.md` beside this)."""

from playbooks.stalls.playbook import StallOptions, diagnose_stalls

__all__ = ["StallOptions", "diagnose_stalls"]
