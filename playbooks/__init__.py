"""Playbooks: each reads a run from the store and returns a `Diagnosis` of findings.

A playbook never talks to a GPU or an engine; it works from recorded rows, so the same
findings come back from a file someone attached to an incident. Runbooks (markdown) live
beside the code.
"""

from playbooks.findings import Diagnosis, Evidence, Finding
from playbooks.stalls import StallOptions, diagnose_stalls

__all__ = ["Diagnosis", "Evidence", "Finding", "StallOptions", "diagnose_stalls"]
