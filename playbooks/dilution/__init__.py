"""Playbook `dilution`: "the benchmark says 2x, production sees much less", split into measured
parts. Runbook: playbooks/dilution/dilution.md.

Modules: `properties` (each run's traffic, property by property, with its SQL), `plan` (which
properties differ, the re-runs and their requests as recipes, the budget), `metrics` (the
headline metrics and their bootstrap spread), `attribution` (parts, interaction, uncertainty),
`strata` (matched strata without re-runs), `findings` (the verdict), `playbook` (the order and
the Diagnosis), `api` (plan, re-run, analyse, a DataFrame).
"""

from playbooks.dilution.api import measure_dilution, plan_dilution, rerun, table_lines
from playbooks.dilution.playbook import DilutionOptions, diagnose_dilution, frame

__all__ = ["DilutionOptions", "diagnose_dilution", "frame", "measure_dilution", "plan_dilution",
           "rerun", "table_lines"]
