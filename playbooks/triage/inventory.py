"""What a run has, which playbooks that lets run, and what the missing data would have told.

One query counts every kind of row a playbook reads (the SQL goes in the triage's evidence).
A playbook runs when the data its registration `needs` exist (`playbooks/registry.py`);
otherwise the reason is kept. Each missing source comes
with the question it would have settled, and is marked relevant when a finding of this run
left that question open (an engine step log matters where stalls were found, not on a clean
run).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import duckdb

from playbooks.engine_setup import engine_setup
from playbooks.registry import PLAYBOOKS
from playbooks.sql import fetch_one

INVENTORY_SQL = """
SELECT (SELECT count(*) FROM requests WHERE run_id = $run_id) AS requests,
       (SELECT count(*) FROM chunks WHERE run_id = $run_id AND content) AS content_chunks,
       (SELECT count(DISTINCT replica) FROM requests WHERE run_id = $run_id AND replica IS NOT NULL)
           AS replicas,
       (SELECT count(*) FROM engine_steps WHERE run_id = $run_id) AS engine_steps,
       (SELECT count(*) FROM metric_samples WHERE run_id = $run_id) AS metric_samples,
       (SELECT count(*) FROM memory_samples WHERE run_id = $run_id) AS memory_samples,
       (SELECT count(*) FROM gpu_samples WHERE run_id = $run_id) AS gpu_samples,
       (SELECT count(*) FROM client_samples WHERE run_id = $run_id) AS client_samples,
       (SELECT count(*) FROM hang_captures WHERE run_id = $run_id) AS hang_captures,
       (SELECT count(*) FROM startup_logs WHERE run_id = $run_id) AS startup_logs,
       (SELECT count(*) FROM traces WHERE run_id = $run_id) AS traces,
       (SELECT count(*) FROM configs WHERE run_id = $run_id) AS configs,
       (SELECT count(*) FROM link_probes WHERE run_id = $run_id) AS link_probes,
       (SELECT count(*) FROM requests JOIN runs USING (run_id) WHERE run_id = $run_id
          AND json_extract_string(runs.config, '$.workload.workload') = 'structured')
           AS structured_requests,
       (SELECT count(*) FROM metric_samples WHERE run_id = $run_id
          AND starts_with(name, 'vllm:spec_decode_')) AS spec_decode_samples,
       (SELECT CASE WHEN count(DISTINCT coalesce(tenant, '')) > 1 THEN count(*) ELSE 0 END
          FROM requests WHERE run_id = $run_id) AS tenant_requests,
       (SELECT count(*) FROM requests WHERE run_id = $run_id AND adapter IS NOT NULL)
           AS adapter_requests
"""
_COUNTS = ("requests", "content_chunks", "replicas", "engine_steps", "metric_samples",
           "memory_samples", "gpu_samples", "client_samples", "hang_captures", "startup_logs",
           "traces", "configs", "link_probes", "structured_requests", "spec_decode_samples",
           "tenant_requests", "adapter_requests")

# source -> (the question it settles, verdicts that leave that question open)
QUESTIONS: dict[str, tuple[str, tuple[str, ...]]] = {
    "engine_steps": ("an engine step log (/engine/steps, or a profiler trace) would separate "
                     "prefill interference and preemption from host pauses, and confirm a hang "
                     "from the engine's side",
                     ("engine_wide_stall", "periodic_engine_stall", "private_stall",
                      "engine_stopped", "uniform_slowdown", "ttft_outside_engine")),
    "metric_samples": ("the target's /metrics scraped during the run would show its queue, KV "
                       "pool and preemptions beside the client's view",
                       ("private_stall", "engine_stopped", "ttft_outside_engine",
                        "head_of_line_blocking")),
    "memory_samples": ("memory series from /metrics would show growth per finished request and "
                       "whether the KV pool ran out", ("private_stall", "preemption_stall")),
    "gpu_samples": ("GPU telemetry (`infbench run --gpu-probe`) would show throttling, clocks and "
                    "power at the times of the slow spells",
                    ("engine_wide_stall", "periodic_engine_stall", "uniform_slowdown",
                     "replica_slower", "replica_cause_not_in_gpu_telemetry")),
    "hang_captures": ("a hang capture taken while the engine was stuck (`infbench diagnose hang "
                      "--url URL --run RUN`) would name the rank and the collective it waits on",
                      ("engine_stopped",)),
    "configs": ("the engine's configuration (`infbench config capture --run RUN`, or a target "
                "that exposes it) would say which setting capped the batch or the context",
                ("private_stall", "preemption_stall", "ttft_outside_engine")),
    "link_probes": ("a link probe on the run's hosts (`infbench probe links --run RUN`) would "
                    "say whether a slow rank or link makes every tensor-parallel step longer",
                    ("uniform_slowdown", "engine_wide_stall", "periodic_engine_stall")),
    "startup_logs": ("the engine's start-up log (`infbench diagnose startup LOG --run RUN`) would "
                     "show its KV pool size and where its memory went",
                     ("kv_cache_exhausted", "preemption_stall", "memory_growth_per_request")),
    "gpu_model": ("the GPU model (`--gpu` when running, or in the engine's config) would let "
                  "decode MBU be computed", ("uniform_slowdown",)),
}


@dataclass
class Inventory:
    run_id: str
    counts: dict[str, int]
    sql: str
    model: str | None
    gpu: str | None
    run: dict[str, str] = field(default_factory=dict)      # playbook -> why it runs
    skipped: dict[str, str] = field(default_factory=dict)  # playbook -> why it does not

    @property
    def fleet(self) -> bool:
        return self.counts["replicas"] > 1

    def sources(self) -> dict[str, bool]:
        have = {k: v > 0 for k, v in self.counts.items() if k not in ("requests", "replicas")}
        return {**have, "gpu_model": self.gpu is not None}


def take_inventory(con: duckdb.DuckDBPyConnection, run_id: str, config: dict[str, Any],
                   model: str | None) -> Inventory:
    sql, row = fetch_one(con, INVENTORY_SQL, run_id=run_id)
    counts = dict(zip(_COUNTS, (int(v or 0) for v in row), strict=True))
    setup = engine_setup(config, model)
    inv = Inventory(run_id, counts, sql, setup.model, setup.gpu)
    for pb in PLAYBOOKS:
        ok, why = pb.needs.check(counts, inv.gpu, inv.model)
        (inv.run if ok else inv.skipped)[pb.name] = why
    return inv


def missing(inv: Inventory, verdicts: set[str]) -> list[dict[str, Any]]:
    """Each absent source, what it would have settled, and whether a finding here left that
    open (relevant first)."""
    have = inv.sources()
    out = []
    for source, (question, opens) in QUESTIONS.items():
        if have.get(source, False):
            continue
        if source == "hang_captures" and "engine_stopped" not in verdicts:
            continue  # a capture is only missing where the engine stopped
        if source == "link_probes" and not verdicts & set(opens):
            continue  # links only matter where a slowdown or pauses are to be explained
        out.append({"source": source, "question": question,
                    "relevant": bool(verdicts & set(opens))})
    return sorted(out, key=lambda m: not m["relevant"])
