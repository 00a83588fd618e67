"""Playbooks: each reads a run from the store and returns a `Diagnosis` of findings.

A playbook never talks to a GPU or an engine; it works from recorded rows, so the same
findings come back from a file someone attached to an incident. Each playbook is a package
(`stalls/`, `mbu/`, ...) with its runbook (markdown) beside its code, over a shared core:
`context` (what a run's rows say about its engine and workload), `findings` (the Diagnosis
and Finding types) and `sql` (query helpers). `registry` lists every playbook once (name,
verb, options type, the data it needs): the CLI, `show` and the triage read it.
"""

from playbooks.findings import Diagnosis, Evidence, Finding
from playbooks.stalls import StallOptions, diagnose_stalls

__all__ = ["Diagnosis", "Evidence", "Finding", "StallOptions", "diagnose_stalls"]
