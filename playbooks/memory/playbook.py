"""Playbook `memory`: where a run's memory went. Runbook: playbooks/memory/memory.md.

Order: the ledger (which series the target exposed) -> fixed vs growing components ->
growth per finished request and the suspects it rules out -> KV exhaustion (when the pool
filled, the preemptions after, prompts or outputs) -> the concurrency the pool holds, and
(given a sweep the command ran) whether that cap holds against queueing and goodput.
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb

from playbooks.context import load_context
from playbooks.findings import Diagnosis
from playbooks.memory.exhaustion import cap_test, exhaustion_finding, find_exhaustion
from playbooks.memory.growth import (
    BATCH_SQL,
    analyse_growth,
    components,
    floats,
    growth_finding,
    suspects,
)
from playbooks.sql import fetch


@dataclass
class MemoryOptions:
    cap_sweep_id: str | None = None   # a sweep at and above the recommended cap (the command runs it)

    def validate(self) -> None:
        if self.cap_sweep_id is not None and not self.cap_sweep_id.strip():
            raise ValueError("cap_sweep_id: empty")


def diagnose_memory(con: duckdb.DuckDBPyConnection, run_ref: str,
                    options: MemoryOptions | None = None) -> Diagnosis:
    opts = options or MemoryOptions()
    opts.validate()
    ctx = load_context(con, run_ref)
    n_mem, replicas = con.execute(
        "SELECT count(*), list(DISTINCT replica ORDER BY replica) FILTER (replica IS NOT NULL) "
        "FROM memory_samples WHERE run_id = ?", [ctx.run_id]).fetchone() or (0, None)
    if replicas and len(replicas) > 1:
        # One engine's ledger: the replicas' counters and memory cannot be added up.
        raise ValueError(
            f"run {ctx.run_id} is a fleet run ({len(replicas)} replicas: {', '.join(replicas)}); "
            "the memory playbook reads one engine's ledger: run the workload against one "
            "replica (infbench run --url URL) and diagnose that run")
    sources = {**ctx.data_sources(), "memory_samples": n_mem > 0}
    diag = Diagnosis("memory", ctx.run_id, sources)
    diag.context["no_findings"] = ("No findings: no memory series grew with the finished "
                                   "requests and the KV pool never ran out.")
    if not n_mem:
        diag.notes.append("No memory samples: the target's /metrics was not scraped or exposes "
                          "none of the series infbench/loadgen/telemetry/memory_ledger.py reads.")
    g = analyse_growth(con, ctx.run_id)
    if g is not None:
        comp = components(con, ctx.run_id)
        batch = fetch(con, BATCH_SQL, run_id=ctx.run_id) if ctx.has_steps else None
        # Suspects explain growth; with none, there is nothing to rule in or out.
        sus = suspects(g, floats(g.ledger["kv_blocks_total"]), batch) \
            if any(x.growing for x in g.series) else []
        diag.context["ledger"] = {
            "samples": g.samples, "requests_finished": g.finished,
            "series": {s.name: {"first_bytes": s.first, "last_bytes": s.last,
                                "slope_bytes_per_request": s.fit.slope if s.fit else None,
                                "ci95": [s.fit.lo, s.fit.hi] if s.fit else None,
                                "r2": s.fit.r2 if s.fit else None,
                                "growth_bytes": s.growth, "kind": "growing" if s.growing else "fixed"}
                       for s in g.series},
            "components": {c[0]: {"bytes": c[2], "kind": "fixed" if c[1] == c[2] else "changed"}
                           for c in comp[1]},
            "suspects": sus}
        if not any(s.name == "rss" for s in g.series):
            diag.notes.append("No process RSS beside the finished-request counter: growth per "
                              "request cannot be measured.")
        f = growth_finding(g, sus, comp, batch[0] if batch else None)
        if f is not None:
            diag.findings.append(f)
    x = find_exhaustion(con, ctx.run_id, ctx.has_steps) if (n_mem or ctx.has_steps) else None
    if x is not None:
        diag.context["kv_exhaustion"] = {
            "t_s": x.t_ns / 1e9, "blocks_total": x.blocks_total, "preemptions": x.preemptions,
            "preemptions_after_fill": x.preemptions_after, "filled_by": x.filled_by,
            "prompt_tokens": x.prompt_tokens, "output_tokens": x.output_tokens, "cap": x.cap,
            "observed_concurrency": x.client_concurrency or x.peak_running,
            "peak_running": x.peak_running}
        slo = {k: float(v) for k, v in (ctx.config.get("slo_ms") or {}).items()}
        test = cap_test(con, opts.cap_sweep_id, x.cap, slo) if opts.cap_sweep_id else None
        if test is not None:
            diag.context["cap_test"] = test[0]
        diag.findings.append(exhaustion_finding(x, test))
    elif not ctx.has_steps and not n_mem:
        diag.notes.append("Neither a step log nor KV series: KV exhaustion was not checked.")
    return diag
