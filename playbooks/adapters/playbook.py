"""Playbook `adapters`: LoRA adapters taking turns because a batch holds too few of them.

Order: the adapters the run asked for (none: nothing to say) -> latency per adapter and TTFT
against the distinct adapters in flight at send -> the batches' composition (step log, else
vLLM's `vllm:lora_requests_info`) -> `adapter_serialization` when, in at least
`min_blocked_share` of the steps (scrapes), the batch held max_loras adapters while requests of
another adapter waited for a slot, and the run asked for more adapters than max_loras; the fix
is `--max-loras N`, N the distinct adapters seen. Without either source the latency alone
cannot tell a slot wait from any other queue: `adapter_serialization_suspected` (low
confidence) where TTFT grows with the adapters in flight, and a note saying which data would
tell.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import duckdb

from infbench.store import get_run
from playbooks.adapters.composition import Composition, composition
from playbooks.adapters.latency import AdapterLatency, InFlight, adapter_latency, in_flight
from playbooks.findings import Diagnosis, Evidence, Finding

SUSPECT_GROWTH = 2.0      # median TTFT at the most adapters in flight over that at the fewest
MIN_BUCKET_REQUESTS = 5   # requests a count of adapters in flight needs to be compared
CRITICAL_SHARE = 0.5      # blocked in half the steps: most of the run waited for slots
WHAT_WOULD_TELL = ("the batches' composition: scrape the engine's /metrics during the run "
                   "(vLLM exports vllm:lora_requests_info: max_lora and the adapters running "
                   "and waiting; infbench run scrapes /metrics by default), or the bundled "
                   "engine's step log (lora_adapters, lora_waiting)")


@dataclass
class AdapterOptions:
    min_blocked_share: float = field(default=0.05, metadata={
        "help": "Share of steps (or scrapes) with requests waiting for an adapter slot from "
                "which serialization is named."})

    def validate(self) -> None:
        if not 0.0 < self.min_blocked_share <= 1.0:
            raise ValueError(f"min-blocked-share: must be in (0, 1], got {self.min_blocked_share}")


def _fix(n: int, max_loras: int) -> list[str]:
    return [f"Serve with --max-loras {n} (vLLM; the run asked for {n} distinct adapters, the "
            f"engine holds {max_loras} per batch): every adapter then batches with the others "
            "instead of waiting for the batch to empty. Each slot reserves GPU memory for an "
            "adapter of --max-lora-rank: check the KV pool after (`infbench diagnose memory`).",
            "Where memory does not allow N slots: route each adapter to fewer replicas (an "
            "adapter's requests batch together), or merge the hot adapters into the base weights."]


def _serialization(comp: Composition, lat: AdapterLatency, flight: InFlight,
                   min_share: float) -> Finding | None:
    n = len(lat.adapters)
    if comp.blocked_share < min_share or n <= comp.max_loras:
        return None
    where = "steps" if comp.source == "engine_steps" else "scrapes"
    growth = flight.growth(MIN_BUCKET_REQUESTS)
    grows = (f" Median TTFT was {growth[1]:.0f} ms with {growth[0]} adapter(s) in flight at send "
             f"and {growth[3]:.0f} ms with {growth[2]}." if growth and growth[3] > 1.2 * growth[1]
             else "")
    severity = "critical" if comp.blocked_share >= CRITICAL_SHARE else "warning"
    return Finding(
        "adapter_serialization", f"Adapters take turns: a batch holds max_loras={comp.max_loras}",
        0.9 if comp.source == "engine_steps" else 0.75, severity,
        f"In {comp.blocked_share:.0%} of the {where} the batch held its {comp.max_loras} "
        f"adapter(s) while requests of another adapter waited for a slot; the run asked for {n} "
        f"adapters.{grows} Requests of an adapter not in the batch wait until it empties of the "
        "others (vLLM skips them at admission).",
        [Evidence("batch_composition", comp.values, comp.sql,
                  note=f"from the {'engine step log' if comp.source == 'engine_steps' else 'scrapes of vllm:lora_requests_info (the label set updated last at each scrape)'}"),
         Evidence("latency_by_adapter", lat.values(), lat.sql),
         Evidence("ttft_by_adapters_in_flight", flight.values(), flight.sql,
                  note="distinct adapters among the other requests in flight when each was sent")],
        _fix(n, comp.max_loras), scope={"adapters": n, "max_loras": comp.max_loras})


def _suspected(lat: AdapterLatency, flight: InFlight) -> Finding | None:
    growth = flight.growth(MIN_BUCKET_REQUESTS)
    if growth is None or growth[1] <= 0 or growth[3] < SUSPECT_GROWTH * growth[1]:
        return None
    n = len(lat.adapters)
    return Finding(
        "adapter_serialization_suspected", "TTFT grows with the adapters in flight", 0.4,
        "warning",
        f"Median TTFT was {growth[1]:.0f} ms with {growth[0]} adapter(s) in flight at send and "
        f"{growth[3]:.0f} ms with {growth[2]} ({growth[3] / growth[1]:.1f}x) over {n} adapters: "
        "the signature of adapters waiting for a batch slot (max_loras), but without the "
        "batches' composition it could also be any queue that grows with load.",
        [Evidence("ttft_by_adapters_in_flight", flight.values(), flight.sql,
                  note="distinct adapters among the other requests in flight when each was sent"),
         Evidence("latency_by_adapter", lat.values(), lat.sql)],
        [f"Tell it apart: {WHAT_WOULD_TELL}.",
         f"If the engine's max_loras is below {n}: --max-loras {n}."],
        scope={"adapters": n})


def diagnose_adapters(con: duckdb.DuckDBPyConnection, run_ref: str,
                      options: AdapterOptions | None = None) -> Diagnosis:
    opts = options or AdapterOptions()
    opts.validate()
    run = get_run(con, run_ref)
    lat = adapter_latency(con, run.run_id)
    comp = composition(con, run.run_id) if lat.adapters else None
    diag = Diagnosis("adapters", run.run_id, {
        "client_timeline": bool(lat.rows), "engine_steps": comp is not None and comp.source == "engine_steps",
        "server_metrics": comp is not None and comp.source == "lora_requests_info"})
    diag.context = {"no_findings": "No findings: the run's requests named no adapter "
                                   "(infbench run --adapters)." if not lat.adapters else
                    "No findings: adapters did not wait for batch slots."}
    if not lat.adapters:
        return diag
    flight = in_flight(con, run.run_id)
    diag.context["adapters"] = len(lat.adapters)
    if comp is None:
        diag.notes.append("No engine step log and no vllm:lora_requests_info in the scrapes: "
                          "whether requests waited for an adapter slot cannot be told from "
                          f"latency alone; what would tell: {WHAT_WOULD_TELL}.")
        finding = _suspected(lat, flight)
    else:
        diag.context["max_loras"] = comp.max_loras
        diag.context["blocked_share"] = round(comp.blocked_share, 4)
        finding = _serialization(comp, lat, flight, opts.min_blocked_share)
    if finding is not None:
        diag.findings.append(finding)
    return diag
