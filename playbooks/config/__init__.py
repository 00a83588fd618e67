"""Playbook `config`: the engine's configuration linked to a run, against what the run asked
of it. Runbook: playbooks/config/config.md.

Modules: `settings` (the run's linked configuration and the load facts the checks read),
`checks` (one finding per setting that shaped this run: the batch cap the load ran into, a
context limit requests exceeded, prefix caching off under shared prefixes, a prefill
budget below the prompts), `playbook` (the order and the Diagnosis).
"""

from playbooks.config.playbook import ConfigOptions, diagnose_config

__all__ = ["ConfigOptions", "diagnose_config"]
