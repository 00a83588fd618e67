"""Triage: every playbook a run's data allow, ranked on one ruler (the share of the run's p99
tail each finding owns), with a headline, incidents joined by time, and the data that was
missing (runbook: triage.md)."""

from playbooks.triage.playbook import NO_PROBLEM, Triage, TriageOptions, diagnose_all

__all__ = ["NO_PROBLEM", "Triage", "TriageOptions", "diagnose_all"]
