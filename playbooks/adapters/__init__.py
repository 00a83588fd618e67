"""Playbook `adapters`: LoRA adapters serialized by too few batch slots (max_loras), named from
latency by adapter against the batches' composition. Runbook: playbooks/adapters/adapters.md.

Modules: `latency` (per adapter, and TTFT against the adapters in flight at send),
`composition` (distinct adapters per step at the max_loras ceiling while others wait: the
engine step log, else vLLM's vllm:lora_requests_info), `playbook` (the order and the
Diagnosis).
"""

from playbooks.adapters.playbook import AdapterOptions, diagnose_adapters

__all__ = ["AdapterOptions", "diagnose_adapters"]
