"""Playbook `specdec`: speculative decoding's acceptance from the engine's counters, and its
speed-up per batch size against a run without it. Runbook: playbooks/specdec/specdec.md.

Modules: `counters` (the vllm:spec_decode_* snapshots into increases, counter restarts left
out and said), `streams` (tokens per step the clients saw, EOS-cut steps left out),
`speedup` (throughput per batch-size bucket from the scrapes, speed-up, crossover),
`playbook` (the order and the Diagnosis).
"""

from playbooks.specdec.playbook import SpecdecOptions, diagnose_specdec

__all__ = ["SpecdecOptions", "diagnose_specdec"]
