"""The measurement plan for a run that went through one URL (an external load balancer): which
replica served each request is unknown, so the replicas cannot be compared from it. The plan
sends the same workload (the run's own flags and seed) to each replica directly, as commands.

Two ways, both at the load each replica met behind the balancer (the run's rate or
concurrency divided by the number of replicas):
- one fleet run addressing every replica at once (`--url NAME=URL` per replica, round robin),
  then `infbench diagnose replicas` compares them at matched load; or
- where only one replica can be reached at a time, one run per replica with the same seed
  (the same schedule and lengths: equal workload fingerprints), compared pairwise with
  `infbench gate`, which pairs runs of one fingerprint request by request.
"""

from __future__ import annotations

import math
import shlex
from typing import Any

# Workload description keys (`runs.config.workload`) and the `infbench run` flag for each.
_FLAGS = {"input_tokens": "--input-tokens", "suffix_tokens": "--input-tokens",
          "input_tokens_per_turn": "--input-tokens", "output_tokens": "--output-tokens",
          "prefix_groups": "--prefix-groups", "prefix_tokens": "--prefix-tokens",
          "turns": "--turns", "dataset": "--dataset", "trace": "--trace",
          "time_scale": "--time-scale", "trace_start_s": "--trace-start", "trace_end_s": "--trace-end"}
_DEFAULT_REPLICAS = 3


def _workload_flags(config: dict[str, Any], replicas: int, whole_fleet: bool) -> list[str]:
    wl = config.get("workload") or {}
    out = ["--workload", str(wl.get("workload", "synthetic"))]
    for key, flag in _FLAGS.items():
        value = wl.get(key)
        if value is None or value == "from dataset" or (key == "time_scale" and value == 1.0):
            continue
        out += [flag, str(value)]
    target = config.get("target") or {}
    if target.get("endpoint"):
        out += ["--endpoint", str(target["endpoint"])]
    if target.get("model"):
        out += ["--model", str(target["model"])]
    a = config.get("arrivals") or {}
    share = 1 if whole_fleet else replicas
    kind = a.get("kind")
    if kind:
        out += ["--arrival", str(kind)]
    if kind in ("poisson", "constant", "gamma") and a.get("rate"):
        out += ["--rate", f"{float(a['rate']) / share:g}"]
    if kind == "gamma" and a.get("burstiness") not in (None, 1.0):
        out += ["--burstiness", f"{float(a['burstiness']):g}"]
    if a.get("concurrency"):
        out += ["--concurrency", str(max(1, math.ceil(int(a["concurrency"]) / share)))]
    stop = config.get("stop") or {}
    if stop.get("duration_s"):
        out += ["--duration", f"{float(stop['duration_s']):g}"]
    elif stop.get("num_requests"):
        out += ["--num-requests", str(max(1, math.ceil(int(stop["num_requests"]) / share)))]
    out += ["--seed", str(config.get("seed", 0))]
    return out


def measurement_plan(config: dict[str, Any], db: str, replica_urls: list[str] | None = None) -> list[str]:
    """Commands, in order: the fleet run, its diagnosis, and the one-at-a-time alternative."""
    urls = list(replica_urls or [])
    named = urls or [f"http://REPLICA-{i + 1}:8000" for i in range(_DEFAULT_REPLICAS)]
    n = len(named)
    store = ["--db", db]
    fleet = ["infbench", "run"]
    for i, u in enumerate(named):
        fleet += ["--url", f"r{i + 1}={u}"]
    fleet += ["--route", "round-robin", *_workload_flags(config, n, whole_fleet=True), *store]
    steps = [shlex.join(fleet), shlex.join(["infbench", "diagnose", "replicas", "last", *store])]
    pinned = [shlex.join(["infbench", "run", "--url", u, *_workload_flags(config, n, whole_fleet=False),
                          *store]) for u in named]
    steps.append("Or one replica at a time, the same seed each (equal workload fingerprints): "
                 + " ; ".join(pinned))
    steps.append("then compare each replica's run with the first's: "
                 + shlex.join(["infbench", "gate", "--baseline", "RUN_OF_REPLICA_1",
                               "--candidate", "RUN_OF_REPLICA_2", *store]))
    if not urls:
        steps.insert(0, f"Replace the REPLICA-N URLs with each replica's own address (pod or host "
                        f"IP and port, bypassing the load balancer; as many --url as replicas, {n} shown).")
    return steps
