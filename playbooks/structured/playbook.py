"""Playbook `structured`: structured output's two costs in a run, told apart.

- A **compile stall**, paid once per schema: the first request of a schema the engine has not
  compiled waits for the compile; later ones hit the cache. Read from each schema's first
  request against its later ones (any engine), and from the step log's compiles where the
  run has one (the bundled engine).
- A **recurring mask cost**, paid every step by every structured request: the token mask the
  engine fills per sequence, which either overlaps the forward pass or blocks the step. Only
  the step log says which; a real engine's run cannot, and the playbook says what would.

Order: the run's requests by schema -> the compile stall -> a cache too small for the
schemas in rotation -> the mask (blocking, outlasting the forward, or hidden).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import duckdb
import numpy as np

from infbench.store import get_run
from playbooks.findings import Diagnosis, Evidence, Finding
from playbooks.structured.requests import SchemaRequests, load_requests, schema_sizes, size_fit
from playbooks.structured.steps import StepFacts, load_steps

# A first request counts as stalled when it stands above every one of the NEIGHBOURS later
# requests sent nearest it in time. Without compiles a first request is one more request of its
# stretch of the run, above all NEIGHBOURS of them with probability 1 / (NEIGHBOURS + 1)
# whatever slowed that stretch. The whole run's warm p95 is no such yardstick: first requests
# cluster early in a run, where a busy host or the client's own start-up slows several
# together (3 of 8 cached schemas once read as compiles), and a long slow stretch raises the
# p95 above real compiles outside it. A stall is named when
# as many stalled first requests as there are would happen by chance with probability below
# STALL_ALPHA (binomial tail), and their median excess is at least MIN_STALL_MS. So a run
# where only the new schemas of a mix stall is named too, and one slow first request among
# few is not.
NEIGHBOURS = 9
STALL_ALPHA = 0.01
MIN_STALL_MS = 2.0
MIN_WARM_REQUESTS = 3
# The mask's share of a structured step's time from which blocking is a warning.
MASK_WARNING_SHARE = 0.05
# Share of structured steps where an overlapped mask still outlasted the forward pass.
OUTLAST_SHARE = 0.2


@dataclass
class StructuredOptions:
    def validate(self) -> None:
        return None


def _r(v: float | None, nd: int = 2) -> float | None:
    return None if v is None else round(float(v), nd)


def diagnose_structured(con: duckdb.DuckDBPyConnection, run_ref: str,
                        options: StructuredOptions | None = None) -> Diagnosis:
    (options or StructuredOptions()).validate()
    run = get_run(con, run_ref)
    workload = run.config.get("workload") or {}
    if workload.get("workload") != "structured":
        raise ValueError(f"run {run.run_id}: not a structured-output run (workload "
                         f"{workload.get('workload', 'unknown')!r}); this playbook reads the "
                         "structured workload's requests, labelled by schema")
    reqs = load_requests(con, run.run_id)
    steps = load_steps(con, run.run_id)
    listed = schema_sizes(workload)
    sizes = {key: listed[label] for key, label in reqs.label_of.items() if label in listed}
    diag = Diagnosis("structured", run.run_id,
                     {"requests": bool(reqs.schemas_seen), "engine_steps": steps is not None})
    extra = reqs.extra_ms(NEIGHBOURS)
    diag.context = {
        "schemas_seen": reqs.schemas_seen, "schemas_first_in_opening_burst": len(reqs.burst_schemas),
        "requests_later": int(reqs.ttft["later"].size),
        "warm_ttft_p50_ms": _r(reqs.baseline_ms), "warm_ttft_p95_ms": _r(reqs.warm_quantile(0.95)),
        "first_request_extra_ms_median": _r(float(np.median(list(extra.values()))) if extra else None),
        "no_findings": "No findings: first requests of each schema were as fast as later ones"
                       + (" and no step paid for a token mask." if steps is not None else
                          " (the token mask's cost is not in this run's data: see the note).")}
    if steps is not None:
        diag.context.update({"engine_ms_per_compile": _r(steps.ms_per_compile),
                             "mask_mode": steps.mode,
                             "mask_ms_per_step": _r(steps.mask.get("mask_ms_per_step"), 3),
                             "mask_exposed_ms_per_step": _r(steps.mask.get("exposed_ms_per_step"), 3)})
    else:
        diag.notes.append(
            "No structured-output step log (a real engine's run): the compile stall is measured "
            "from the client only, and whether the token mask blocks the step or overlaps the "
            "forward pass cannot be told. What would tell it: the same load with and without "
            "response_format at matched concurrency (the TPOT difference is the mask's exposed "
            "cost per step), or a profile of the engine core (`infbench trace`) where vLLM's "
            "get_grammar_bitmask runs either beside the forward pass or before it.")
    if reqs.burst_schemas:
        base = reqs.baseline_ms
        diag.context["opening_burst_ttft_median_ms"] = _r(float(np.median(reqs.burst_ttft)))
        diag.notes.append(
            f"{len(reqs.burst_schemas)} of {reqs.schemas_seen} schemas had their first request in "
            f"the run's opening burst (sent before its first token; its {len(reqs.burst_ttft)} "
            f"requests' TTFT median {np.median(reqs.burst_ttft):.0f} ms"
            + (f" against {base:.0f} ms for requests that found their schema compiled" if base else "")
            + "), where every request waits for the first prefills, compiled or not, and on a "
            "fresh server for one-time start costs (vLLM builds its grammar backend on the first "
            "structured request): they are left out of the first-vs-later comparison (schemas "
            "first used later, or a run before this one, tell them apart)")
    if reqs.ttft["later"].size < MIN_WARM_REQUESTS:
        diag.notes.append(f"Only {reqs.ttft['later'].size} requests found their schema compiled: "
                          f"too few to judge the first requests against (need "
                          f"{MIN_WARM_REQUESTS}); send more requests per schema.")
    stall = _compile_stall(reqs, steps, sizes)
    if stall is not None and steps is not None and not steps.compiles["compiles"]:
        # The engine's own log outranks the client's inference: first requests that were
        # slower than their neighbours in a run without a single compile waited on something
        # else (a busy host, a prefill), and naming a compile would send on-call to the cache.
        first = next((e.values for e in stall.evidence if e.name == "first_vs_later"), {})
        diag.notes.append(
            f"The first request of {first.get('schemas_stalled', '?')} of "
            f"{first.get('schemas', '?')} schemas waited longer for its first token than the "
            "requests sent around it, but the engine's step log has no grammar compile in this "
            "run (every schema was found in its cache): not a compile stall.")
        stall = None
    for f in (stall, _cache_too_small(reqs, steps), _mask(steps)):
        if f is not None:
            diag.findings.append(f)
    return diag


def _compile_stall(reqs: SchemaRequests, steps: StepFacts | None,
                   sizes: dict[str, dict]) -> Finding | None:
    extra = reqs.extra_ms(NEIGHBOURS)
    p95 = reqs.warm_quantile(0.95)
    if not extra or p95 is None or reqs.ttft["later"].size < MIN_WARM_REQUESTS:
        return _compile_stall_from_steps(reqs, steps)
    firsts = reqs.ttft["first"]
    above = float(np.mean(firsts > p95))
    k = min(NEIGHBOURS, int(reqs.ttft["later"].size))
    stalled = {label: ms for label, ms in extra.items()
               if reqs.first_ttft[label] > float(reqs.neighbours(label, k).max())}
    per_request = 1.0 / (k + 1)
    chance = _binomial_tail(len(stalled), len(extra), per_request)
    median_extra = float(np.median(list(stalled.values()))) if stalled else 0.0
    if chance > STALL_ALPHA or median_extra < MIN_STALL_MS:
        return _compile_stall_from_steps(reqs, steps)
    new = {label for label, s in sizes.items() if s.get("new")}
    stable = set(sizes) - new
    joined = reqs.ttft["joined"]
    req_values = {
        "schemas": len(extra), "schemas_in_opening_burst": len(reqs.burst_schemas),
        "schemas_stalled": len(stalled), "first_requests_above_warm_p95": round(above, 3),
        "neighbours_per_first_request": k, "chance_per_first_request": round(per_request, 4),
        "chance_of_as_many_without_stall": float(f"{chance:.3g}"),
        "first_ttft_median_ms": _r(float(np.median(firsts))),
        "first_ttft_max_ms": _r(float(firsts.max())),
        "warm_ttft_p50_ms": _r(reqs.baseline_ms), "warm_ttft_p95_ms": _r(p95),
        "extra_ms_per_cold_schema_median": _r(median_extra),
        "extra_ms_per_cold_schema_max": _r(max(stalled.values())),
        "requests_joined": int(joined.size),
        "joined_ttft_median_ms": _r(float(np.median(joined))) if joined.size else None,
        "requests_later": int(reqs.ttft["later"].size)}
    evidence = [Evidence("first_vs_later", req_values, reqs.sql,
                         "kind per request: its schema's first, sent before that first one's "
                         "first token (joined: may have waited on the same compile), or later")]
    worst = sorted(extra.items(), key=lambda kv: -kv[1])[:5]
    evidence.append(Evidence("slowest_first_requests", {key: _r(v) for key, v in worst}, reqs.sql,
                             "TTFT of each schema's first request above the median of the "
                             f"{k} later requests sent nearest it (ms)"))
    said_new = ""
    if new and stable:
        by = {g: [extra[x] for x in extra if x in group] for g, group in
              (("new", new), ("stable", stable))}
        evidence.append(Evidence("new_vs_stable", {
            f"{g}_schemas": len(v) for g, v in by.items()} | {
            f"{g}_extra_ms_median": _r(float(np.median(v))) if v else None for g, v in by.items()},
            None, "from first_vs_later and the workload's schema list (runs.config): new "
            "schemas carry the run's salt, stable ones are the same text every run"))
        if by["stable"] and by["new"]:
            said_new = (f" Schemas new to this run paid {np.median(by['new']):.0f} ms, those "
                        f"sent in earlier runs {np.median(by['stable']):.0f} ms (already cached).")
    fit = size_fit(extra, sizes)
    said_size = ""
    if fit is not None:
        evidence.append(Evidence("extra_vs_schema_size", fit, None,
                                 "least squares of each first request's extra TTFT on its "
                                 "schema's KiB (runs.config workload.schemas)"))
        if fit["ms_per_kib"] > 0 and fit["r"] >= 0.5:
            said_size = (f" It grows with the schema: about {fit['ms_per_kib']:.0f} ms per KiB "
                         f"(r={fit['r']:.2f}).")
    said_engine = ""
    if steps is not None and steps.compiles["compiles"]:
        c = steps.compiles
        evidence.append(_engine_compiles(steps))
        said_engine = (f" The engine's log has {int(c['compiles'])} compiles of "
                       f"{steps.ms_per_compile:.0f} ms each on average"
                       + _while_waiting(c) + ".")
        if steps.mask.get("steps"):
            said_engine += (f" Against it, the recurring token mask added "
                            f"{steps.mask['exposed_ms_per_step']:.3f} ms to each structured step "
                            f"(of {steps.mask['mask_ms_per_step']:.3f} ms filled).")
    return _stall_finding(
        min(0.95, 1.0 - chance),
        f"The first request of {len(stalled)} of {len(extra)} schemas waited {median_extra:.0f} ms "
        f"more for its first token than the requests sent around it whose schema was compiled "
        f"(median; up to "
        f"{max(stalled.values()):.0f} ms); later requests of the same schemas did not: a compile "
        f"stall, paid once per schema, on TTFT.{said_size}{said_new}{said_engine}",
        evidence, reqs)


def _while_waiting(c: dict) -> str:
    """Whether the engine kept stepping other requests while some waited on a compile (vLLM
    does), or stopped (a compile that blocks the whole step)."""
    waiting, working = int(c["steps_with_waiting"]), int(c["steps_working_while_waiting"])
    if not waiting:
        return ""
    if working == waiting:
        return (f"; in all {waiting} steps with requests waiting on a compile other requests "
                "kept stepping: the compile held only the requests waiting on it")
    return (f"; in {waiting - working} of {waiting} steps with requests waiting on a compile "
            "nothing else ran")


def _binomial_tail(m: int, n: int, p: float) -> float:
    """P(X >= m) for X ~ Binomial(n, p)."""
    return sum(math.comb(n, i) * p ** i * (1 - p) ** (n - i) for i in range(m, n + 1))


def _engine_compiles(steps: StepFacts) -> Evidence:
    c = steps.compiles
    return Evidence("engine_compiles", {
        "compiles": int(c["compiles"]), "ms_per_compile": _r(steps.ms_per_compile),
        "max_step_ms_per_compile": _r(c["max_step_ms_per_compile"]),
        "cache_hits": int(c["hits"]), "cache_misses": int(c["misses"]),
        "steps_with_requests_waiting": int(c["steps_with_waiting"]),
        "steps_stepping_others_meanwhile": int(c["steps_working_while_waiting"]),
        "peak_requests_waiting": int(c["peak_waiting"])}, steps.sql["compiles"])


def _compile_stall_from_steps(reqs: SchemaRequests, steps: StepFacts | None) -> Finding | None:
    """Where the client cannot compare (every first request in the opening burst, too few
    later ones), the engine's log still says whether requests waited on compiles."""
    if steps is None or not steps.compiles["compiles"] or not steps.compiles["steps_with_waiting"]:
        return None
    per = steps.ms_per_compile or 0.0
    if per < MIN_STALL_MS:
        return None
    c = steps.compiles
    return _stall_finding(
        0.7,
        f"The engine compiled {int(c['compiles'])} schemas, {per:.0f} ms each on average, while "
        f"requests waited for them (up to {int(c['peak_waiting'])} at a step){_while_waiting(c)}. "
        "The client's rows could not show it: the schemas' first requests went "
        "out in the run's opening burst, or too few requests found their schema compiled.",
        [_engine_compiles(steps)], reqs)


def _stall_finding(confidence: float, summary: str, evidence: list[Evidence],
                   reqs: SchemaRequests) -> Finding:
    return Finding(
        "grammar_compile_stall", "The first request of each schema waits for its grammar to compile",
        confidence, "warning", summary, evidence,
        ["pre-warm the schemas: send one request per schema in rotation when a replica starts, "
         "before it takes traffic (the compile is then paid by nobody waiting)",
         "keep the engine's grammar cache larger than the schemas in rotation (vLLM: "
         "VLLM_XGRAMMAR_CACHE_MB; the bundled engine: --grammar-cache-size), or a warm schema "
         "is compiled again",
         "if many new schemas arrive together, more compile threads shorten the queue behind "
         "the first (vLLM compiles on (CPUs+1)//2 threads; the bundled engine: "
         "--grammar-compile-workers)"],
        scope={"requests": reqs.cold_requests})


def _cache_too_small(reqs: SchemaRequests, steps: StepFacts | None) -> Finding | None:
    if steps is None:
        return None
    compiles, schemas = int(steps.compiles["compiles"]), reqs.schemas_seen
    if not schemas or compiles <= schemas:
        return None
    return Finding(
        "grammar_cache_too_small", "The grammar cache evicts schemas still in rotation",
        0.85, "warning",
        f"The engine compiled {compiles} times for {schemas} distinct schemas: "
        f"{compiles - schemas} compiles were of schemas compiled before and evicted, each "
        "another stall on a request that should have hit the cache.",
        [Evidence("compiles_vs_schemas", {"compiles": compiles, "distinct_schemas": schemas,
                                          "recompiles": compiles - schemas,
                                          "cache_hits": int(steps.compiles["hits"]),
                                          "cache_misses": int(steps.compiles["misses"])},
                  steps.sql["compiles"], f"distinct schemas from: {reqs.sql}")],
        [f"raise the grammar cache to hold at least {schemas} schemas (the bundled engine: "
         f"--grammar-cache-size {schemas}; vLLM: VLLM_XGRAMMAR_CACHE_MB)"])


def _mask(steps: StepFacts | None) -> Finding | None:
    if steps is None or steps.mode is None:
        return None
    m = steps.mask
    share = steps.exposed_share
    values = {"structured_steps": int(m["steps"]), "seqs_per_step": _r(m["seqs_per_step"]),
              "mask_ms_per_step": _r(m["mask_ms_per_step"], 3),
              "exposed_ms_per_step": _r(m["exposed_ms_per_step"], 3),
              "step_ms": _r(m["step_ms"], 3), "exposed_share_of_step": _r(share, 4),
              "steps_exposed": int(m["steps_exposed"]), "mode": steps.mode}
    ev = [Evidence("mask_per_step", values, steps.sql["mask"])]
    if steps.mode in ("blocking", "mixed"):
        return Finding(
            "grammar_mask_blocks_step", "The token mask blocks every step it is in", 0.9,
            "warning" if share >= MASK_WARNING_SHARE else "info",
            f"The engine fills the token mask before the forward pass: {m['mask_ms_per_step']:.3f} "
            f"ms per step ({m['seqs_per_step']:.1f} structured sequences) on top of the step, "
            f"{share:.1%} of a structured step's {m['step_ms']:.2f} ms, paid by every token of "
            "every request in the batch, structured or not.", ev,
            ["overlap the mask with the forward pass: vLLM's engine core fills the bitmask while "
             "the forward runs (EngineCore.step); SGLang does unless --disable-overlap-schedule; "
             "the bundled engine: --grammar-mask-overlap"])
    if m["steps_exposed"] >= OUTLAST_SHARE * m["steps"]:
        return Finding(
            "grammar_mask_outlasts_forward", "The token mask takes longer than the forward pass",
            0.8, "warning",
            f"The mask overlaps the forward pass but outlasted it on {m['steps_exposed']} of "
            f"{m['steps']} structured steps: {m['mask_ms_per_step']:.3f} ms of mask per step, "
            f"{m['exposed_ms_per_step']:.3f} ms of it beyond the forward ({share:.1%} of the step).",
            ev, ["fewer structured sequences per step (a lower max_num_seqs for this traffic) or a "
                 "faster grammar backend; the overlap cannot hide a mask longer than the forward"])
    return Finding(
        "grammar_mask_overlapped", "The token mask overlaps the forward pass and costs no step time",
        0.85, "info",
        f"The mask ({m['mask_ms_per_step']:.3f} ms per step for {m['seqs_per_step']:.1f} "
        f"structured sequences) runs beside the forward pass ({m['step_ms']:.2f} ms per step) "
        "and added nothing to the steps.", ev,
        ["nothing to change for the mask; keep the overlap on (a blocking mask would add its "
         "milliseconds to every step)"])
