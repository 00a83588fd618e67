"""Playbook `structured`: structured output's compile stall (once per schema) against its
recurring token-mask cost (every step). Runbook: playbooks/structured/structured.md.

Modules: `requests` (each schema's first request against its later ones, from the client's
rows: any engine), `steps` (the compiles, cache and per-step mask from the bundled engine's
step log), `playbook` (the order, the findings and the Diagnosis).
"""

from playbooks.structured.playbook import StructuredOptions, diagnose_structured

__all__ = ["StructuredOptions", "diagnose_structured"]
