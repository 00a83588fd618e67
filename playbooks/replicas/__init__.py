"""Playbook `replicas`: one replica drags the fleet's p99. First proves a replica is slower at
equal load (not only busier), names its share of the fleet's tail, then walks its GPU
telemetry against its peers' (clocks and throttle reasons, power and thermal, PCIe, XID and
ECC). Runbook: playbooks/replicas/replicas.md.

Modules: `observations` (per-request and per-step data of a fleet run), `matched` (the
matched-load statistic), `compare` (every replica against its peers, slower vs busier),
`fleet_tail` (a replica's effect on the fleet p99), `hardware` (the telemetry walk), `plan`
(the measurement plan for a one-URL run), `playbook` (findings).
"""

from playbooks.replicas.playbook import ReplicaOptions, diagnose_replicas

__all__ = ["ReplicaOptions", "diagnose_replicas"]
