"""Turning the stall measurements into findings: verdict, confidence, severity, evidence,
next action. Thresholds for raising a finding live here, each with its reason."""

from __future__ import annotations

from typing import Any

import duckdb
import numpy as np

from playbooks.context import RunContext
from playbooks.findings import Evidence, Finding
from playbooks.sql import fetch_one
from playbooks.stalls.damage import RULE, Damage, damage, severity
from playbooks.stalls.events import Baseline, Events
from playbooks.stalls.periodic_sources import JITTER_SCALE, RANK_TIE, Periodicity
from playbooks.stalls.periodicity import SIGNIFICANT_LLR
from playbooks.stalls.prefill import (
    ELEVATION_FINDING,
    PrefillResult,
    measured_budget,
    roofline_budget,
)
from playbooks.stalls.server_view import SLOWDOWN_FINDING, DecodeVsRoofline, TtftSplit
from playbooks.stalls.tail import GapIndex, Tail

HOL_ADDED_MS = 50.0       # TTFT added per short request worth a finding...
PREEMPTIONS_SQL = """
SELECT coalesce(sum(preemptions), 0) AS step_log_preemptions,
       (SELECT max(value) - min(value) FROM metric_samples
         WHERE run_id = $run_id AND name = 'vllm:num_preemptions_total') AS metric_preemptions
FROM engine_steps WHERE run_id = $run_id
"""


def _r(v: Any, nd: int = 2) -> Any:
    return round(float(v), nd) if isinstance(v, float | np.floating) else v


def _tail_evidence(tail: Tail) -> Evidence:
    return Evidence("share_of_p99_itl", {
        "p99_itl_ms": _r(tail.p99_ms), "p99_itl_without_these_ms": _r(tail.p99_without_ms),
        "share_of_gaps_at_or_above_p99": _r(tail.tail_share, 3),
        "gaps_in_these_events": tail.gaps_in_events,
        "p99_itl_without_any_stall_ms": _r(tail.p99_clean_ms), "p99_gain": _r(tail.p99_gain)},
        tail.sql, "gaps above the stall threshold assigned to events by their end time; p99 "
        "recomputed without them, and without any stall; p99 gain = the larger of p99 over p99 "
        "without these and (p99 / p99 without any stall) ** share: their share of the rise all "
        "stalls make, which still counts when other stalls fill the tail too")


def _period_evidence(per: Periodicity) -> list[Evidence]:
    out = []
    for name, f, clock, unit in (("period_seconds", per.seconds, "seconds", "s"),
                                 ("period_steps", per.steps, "steps", "steps"),
                                 ("period_output_tokens", per.tokens, "output tokens", "tokens")):
        if f is None:
            continue
        grid = ("fitted in this clock" if per.grid_clock in (None, clock)
                else f"same events and periods as the {per.grid_clock} fit")
        out.append(Evidence(name, {
            "period": _r(f.period, 4 if unit == "s" else 1), "unit": unit,
            "strength": _r(f.strength, 3), "events_on_period": f.hits,
            "missed_periods": f.missed, "extra_events": f.extra,
            "jitter_periods": _r(f.jitter, 4), "log_likelihood_ratio": _r(f.llr, 1),
            "significant": f.significant}, None,
            f"{grid}; events on a grid allowing missing and extra events, against random "
            f"times (significant: LLR >= {SIGNIFICANT_LLR:g}); strength = share of events on "
            "the period when significant, else 0"))
    return out


def _part_values(prefix: str, d: Damage) -> dict[str, Any]:
    return {f"{prefix}_events": d.events,
            f"{prefix}_median_gap_ms": _r(d.median_gap_ms) if d.events else None,
            f"{prefix}_share_of_p99_tail": _r(d.tail.tail_share, 3),
            f"{prefix}_wall_time_lost_s": _r(d.lost_s, 3),
            f"{prefix}_lost_per_minute_s": _r(d.lost_per_minute_s, 3)}


def _costs(d: Damage, tail: str = "") -> str:
    tail = tail or f"the gaps at or above p99 ITL ({d.tail.p99_ms:.0f} ms)"
    return (f"hold {d.tail.tail_share:.0%} of {tail} and cost {d.lost_s:.1f} s of wall time "
            f"({d.lost_per_minute_s:.2f} s a minute)")


def engine_wide_finding(ev: Events, idx: np.ndarray, gaps: GapIndex, per: Periodicity,
                        cross: Evidence, base: Baseline, has_steps: bool) -> Finding:
    fit = per.primary
    # A significant period names its source however many unrelated pauses surround it:
    # significance already says the grid is no accident (random pause times never reach
    # it), and how much the period matters is its share of the damage, reported beside
    # that of the pauses off it, not a vote of the events.
    periodic = fit is not None and fit.significant
    whole = damage(gaps, ev, idx, base.median_ms)
    tail = whole.tail
    evidence = [cross, Evidence("engine_wide_stalls", {
        "events": len(idx), "median_gap_ms": _r(np.median(ev.gap_ms[idx])),
        "max_gap_ms": _r(np.max(ev.max_gap_ms[idx])), "typical_itl_ms": _r(base.median_ms),
        "median_requests_stalled": _r(float(np.median(ev.n_stalled[idx]))),
        "longest_engine_step_ms": _r(float(np.nanmax(ev.covering_step_ms[idx])))
        if has_steps else None}, ev.sql), _tail_evidence(tail), Evidence("damage", {
            "p99_gain": _r(tail.p99_gain), "wall_time_lost_s": _r(whole.lost_s, 3),
            "streaming_span_s": _r(whole.span_s), "lost_per_minute_s": _r(whole.lost_per_minute_s, 3),
            "share_of_wall_time_lost": _r(whole.lost_share, 4)}, ev.sql,
            "wall time lost = sum over these events of (gap_ms - typical ITL): every stream "
            "stops at once, so it is time the engine produced nothing; streaming span = first "
            "to last gap end of the itl view; p99 gain: see share_of_p99_itl. Severity: "
            + RULE), *_period_evidence(per)]
    ranked = [s for s in per.sources if s.score > 0] if periodic else []
    tied = per.tied() if periodic else []
    if ranked:
        evidence.append(Evidence("periodic_sources_ranked", {
            **{f"{i + 1}. {s.clock}": _r(s.score, 3) for i, s in enumerate(ranked)},
            "tied_with_first": ", ".join(x.clock for x in tied[1:]) or None}, per.shapes_sql,
            f"score = strength x exp(-jitter in periods / {JITTER_SCALE:g}) in that clock, all on "
            f"one grid; tied_with_first: clocks whose score at the low end of their jitter's "
            f"2-standard-error interval (n events on the period) reaches {RANK_TIE:g} x the "
            "first's: these few events cannot rank them"))
    if periodic:
        assert fit is not None and per.seconds is not None
        # The fit's own split: an event is on the period when the grid explains it better
        # than the uniform background does (PeriodFit.grid >= 0).
        on = fit.grid >= 0
        on_d, off_d = (damage(gaps, ev, idx[m], base.median_ms) for m in (on, ~on))
        unit = {"seconds": "s", "steps": "steps", "output tokens": "tokens"}[per.grid_clock or "seconds"]
        evidence.append(Evidence("periodic_vs_irregular", {
            "clock": per.grid_clock, "period": _r(fit.period, 4 if unit == "s" else 1),
            "unit": unit, "periods_hit": fit.hits, "periods_missed": fit.missed,
            **_part_values("on_period", on_d), **_part_values("irregular", off_d)}, tail.sql,
            "events split by the period fit (on the period: nearer a grid point than the "
            "uniform background explains, as the fit itself counts them); share of p99 tail = "
            "share of the gaps of these rows at or above p99 ITL that belong to each part's "
            "events (assigned by end time); wall time lost = sum over the part's events of "
            "(gap_ms - typical ITL)"))
        steps = f" = every {per.steps.period:.0f} steps" if per.steps is not None else ""
        head = f"{on_d.events} of {len(idx)}" if off_d.events else f"{len(idx)}"
        summary = (f"{head} engine-wide pauses recur every {per.seconds.period:.3f} s{steps} "
                   f"({fit.hits} periods with a pause, {fit.missed} without); every running "
                   f"request stalls at once, {on_d.median_gap_ms:.0f} ms each vs a typical ITL of "
                   f"{base.median_ms:.1f} ms; they {_costs(on_d)}.")
        if off_d.events:
            summary += (f" Apart from them, {off_d.events} irregular pauses off the period "
                        f"({off_d.median_gap_ms:.0f} ms each) {_costs(off_d, 'that tail')}.")
        if len(tied) >= 2:
            summary += (f" The {', '.join(x.clock for x in tied)} clocks fit equally well "
                        f"(scores {', '.join(f'{x.score:.2f}' for x in tied)}, alike within what "
                        f"{fit.hits} periods can measure): this run cannot tell these sources "
                        "apart; a run at another load (another step rate) separates them.")
        elif len(ranked) >= 2:
            a, b = ranked[0], ranked[1]
            summary += (f" Most likely {a.name.split(' (')[0]}: it keeps time in {a.clock} "
                        f"(score {a.score:.2f}) better than in {b.clock} ({b.score:.2f}).")
    else:
        summary = (f"{len(idx)} engine-wide pauses: every running request stalled at the same "
                   f"wall time, {np.median(ev.gap_ms[idx]):.0f} ms each; no regular period. They "
                   f"{_costs(whole)}.")
    actions = [f"check first: {x.check}" for x in (tied or ranked[:1])] + [
        "take py-spy dump --native of the engine process during a pause (the step loop's stack)",
        "compare with the step log: the long steps carry no prefill, so the time is host-side"
        if has_steps else
        "this run has no step log (the engine exports none): a profiler trace of the engine "
        "during the stalls (`infbench trace import`) tells a long step from a host-side pause",
    ]
    return Finding("periodic_engine_stall" if periodic else "engine_wide_stall",
                   "Periodic engine-wide stall" if periodic else "Engine-wide stall",
                   0.9 if has_steps else 0.7,
                   severity(tail, whole.median_gap_ms / base.median_ms, whole.lost_share,
                            None if periodic else len(idx)),
                   summary, evidence, actions)


def private_finding(con: duckdb.DuckDBPyConnection, ctx: RunContext, ev: Events, idx: np.ndarray,
                    tail: Tail, cross: Evidence) -> Finding:
    sql, row = fetch_one(con, PREEMPTIONS_SQL, run_id=ctx.run_id)
    step_pre, metric_pre = row
    attributed = idx[ev.cause[idx] == "preemption"]
    requests = sorted({r for i in idx for r in ev.stalled[i]})
    preempt_known = len(attributed) > 0 or bool(metric_pre)
    # One request stalling while others stream costs the engine no throughput: only the
    # tail counts (damage.py); a "visible freeze" by size alone is an engine-wide notion (on a
    # healthy real vLLM two 150 ms private gaps, 20x its ITL, raised a warning with p99 x1.01)
    sev = severity(tail, 0.0)
    evidence = [cross, Evidence("private_stalls", {
        "events": len(idx), "requests_affected": len(requests),
        "events_with_preemption_in_step_log": len(attributed),
        "median_gap_ms": _r(float(np.median(ev.gap_ms[idx]))),
        "median_requests_progressing_meanwhile": _r(float(np.median(ev.n_progressing[idx]))),
        "example_requests": ",".join(map(str, requests[:10]))}, ev.sql),
        Evidence("preemptions", {"step_log": int(step_pre or 0),
                                 "vllm:num_preemptions_total increase": _r(metric_pre)}, sql),
        _tail_evidence(tail)]
    if preempt_known:
        summary = (f"{len(requests)} request(s) stalled alone while others kept streaming "
                   f"({len(idx)} events, median {np.median(ev.gap_ms[idx]):.0f} ms): preempted "
                   f"and recomputed ({len(attributed)} events coincide with preemptions in the step log).")
        return Finding("preemption_stall", "Private stalls from preemption (KV pool exhausted)",
                       0.85 if len(attributed) else 0.6, sev, summary, evidence, [
                           "check KV usage over time (vllm:kv_cache_usage_perc) and the memory "
                           "playbook: the pool runs dry under this load",
                           "cap concurrency (max_num_seqs) or raise gpu_memory_utilization / "
                           "use an FP8 KV cache to fit the working set"])
    summary = (f"{len(requests)} request(s) stalled alone while others kept streaming "
               f"({len(idx)} events): no preemption was recorded, so a slow reader or the network "
               "path of those requests is the likely cause.")
    return Finding("private_stall", "Private stalls (slow reader or unrecorded preemption)",
                   0.5, sev, summary, evidence, [
                       "check the client's socket reads for those requests (stream byte budget, "
                       "proxy buffering)", "scrape vllm:num_preemptions_total to rule preemption out"])


def prefill_finding(ctx: RunContext, res: PrefillResult, n_events: int, tail: Tail | None,
                    itl_target_ms: float) -> Finding | None:
    elev = res.elevation
    if not res.long_prompts or not (n_events or (elev is not None and elev >= ELEVATION_FINDING)):
        return None
    top = res.long_prompts[0]
    evidence = [Evidence("long_prompts", {"count": len(res.long_prompts),
                                          "long_cut_tokens": _r(top["cut"], 0),
                                          "longest_prompt_tokens": top["prompt_tokens"],
                                          "longest_request": top["request_idx"],
                                          "its_prefill_window_ms": _r(top["prefill_window_ms"])}, res.long_sql)]
    if res.itl_during and res.itl_outside:
        evidence.append(Evidence("itl_during_long_prefills", {
            "median_during_ms": _r(res.itl_during["median_ms"]), "p99_during_ms": _r(res.itl_during["p99_ms"]),
            "max_during_ms": _r(res.itl_during["max_ms"]), "median_otherwise_ms": _r(res.itl_outside["median_ms"]),
            "elevation": _r(elev), "gaps_during": res.itl_during["gaps"]}, res.itl_sql))
    lockout = max((h["lockout_ms"] for h in res.hol), default=None)
    if res.hol:
        evidence.append(Evidence("arrivals_locked_out", {
            "max_wait_for_first_token_ms": _r(lockout), "baseline_ttft_ms": _r(res.hol[0]["base_ttft_ms"]),
            "arrivals_during_long_prefills": sum(h["shorts_behind"] for h in res.hol)}, res.hol_sql))
    if tail:
        evidence.append(Evidence("prefill_stall_events", {"events": n_events, "share_of_p99_itl": _r(tail.tail_share, 3),
                                                          "p99_without_ms": _r(tail.p99_without_ms)}, tail.sql))
    budget_note = []
    if res.steps:
        s = res.steps
        evidence.append(Evidence("step_cost", {k: _r(v, 4) for k, v in s.items()}, res.steps_sql,
                                 "duration = fixed_ms + ms_per_token x tokens, fitted on the run's steps"))
        mb = measured_budget(s, itl_target_ms)
        if mb is not None:
            budget_note.append(f"measured: {mb} tokens/step")
            evidence.append(Evidence("token_budget_for_itl_target", {"itl_target_ms": itl_target_ms,
                                     "from_measured_steps": mb, "max_tokens_seen_per_step": s["max_tokens_per_step"]},
                                     None, "from the step_cost line fit"))
    if ctx.setup.model and ctx.setup.gpu:
        try:
            overhead = 0.0
            if res.steps and res.steps.get("fixed_ms") is not None:
                overhead = max(float(res.steps["fixed_ms"]), 0.0)
            decoders = int((res.steps or {}).get("decoders_in_prefill_steps") or 8)
            rb = roofline_budget(ctx.setup, itl_target_ms, decoders, 1024, int(top["prompt_tokens"]) // 2, overhead)
            if rb is not None:
                budget_note.append(f"roofline ({ctx.setup.model} on {ctx.setup.gpu}): {rb} tokens/step")
                evidence.append(Evidence("roofline_token_budget", {"itl_target_ms": itl_target_ms, "budget_tokens": rb,
                                         "decoders": decoders, "fixed_overhead_ms": _r(overhead)}, None,
                                         "largest max_num_batched_tokens whose roofline step (infbench.specs.roofline.step_time) "
                                         "+ fixed overhead meets the target"))
        except ValueError as exc:
            budget_note.append(f"roofline budget unavailable: {exc}")
    summary = (f"Decoders' ITL rises while long prompts prefill (longest {top['prompt_tokens']} tokens, "
               f"prefill window {top['prefill_window_ms']:.0f} ms)")
    summary += f": median ITL x{elev:.1f} during those windows" if elev else ""
    summary += f"; new arrivals waited up to {lockout:.0f} ms for a first token." if lockout else "."
    if budget_note:
        summary += f" Budget for {itl_target_ms:g} ms ITL: " + "; ".join(budget_note) + "."
    return Finding("prefill_interference", "Prefill interference from long prompts",
                   0.85 if res.steps else 0.65,
                   "critical" if elev and elev >= 5 else "warning", summary, evidence,
                   ["lower max_num_batched_tokens to the budget above (chunked prefill on)",
                    "route long prompts to a separate pool or use disaggregated prefill",
                    "cap prompt length per tier"])


def hol_finding(res: PrefillResult) -> Finding | None:
    rows = [h for h in res.hol if h["added_ttft_mean_ms"] is not None
            and h["added_ttft_mean_ms"] >= max(HOL_ADDED_MS, h["base_ttft_ms"] or 0.0)]
    if not rows:
        return None
    n = sum(h["shorts_behind"] for h in rows)
    total = sum(h["added_ttft_total_ms"] for h in rows)
    worst = rows[0]
    return Finding("head_of_line_blocking", "Head-of-line blocking behind long prompts", 0.8,
                   "warning", f"{n} short request(s) queued behind {len(rows)} long prompt(s) paid "
                   f"{total / max(n, 1):.0f} ms of TTFT each on average ({total / 1e3:.2f} s in all); "
                   f"worst: {worst['shorts_behind']} behind request {worst['long_idx']} "
                   f"({worst['long_tokens']} tokens).",
                   [Evidence("ttft_added_per_long_prompt", {
                       f"request {h['long_idx']} ({h['long_tokens']} tok)":
                       f"{h['shorts_behind']} behind, +{h['added_ttft_mean_ms']:.0f} ms each"
                       for h in rows[:5]}, res.hol_sql)],
                   ["schedule short prompts first (priority or a separate queue)",
                    "lower the per-step token budget so admission interleaves with long prefills"])


def ttft_finding(split: TtftSplit) -> Finding | None:
    v = split.values
    client, engine = v.get("client_ttft_ms"), v.get("engine_ttft_ms")
    if client is None or engine is None or not (client >= 2 * engine and client - engine >= 50):
        return None
    outside = client - engine
    lag = v.get("client_loop_lag_p50_ms") or 0.0
    evidence = [Evidence("ttft_split", {k: _r(x) for k, x in v.items()}, split.sql)]
    if v.get("client_bound") or lag >= 0.5 * outside:
        # The load generator itself ran late: its own delay sits between the engine and the
        # stamps, so this run cannot say how much of the gap is network, proxy or frontend.
        return Finding(
            "ttft_outside_engine", "TTFT outside the engine: cannot tell (client-bound run)",
            0.4, "info",
            f"Client TTFT {client:.0f} ms is {client / max(engine, 1e-9):.1f}x the engine's own "
            f"{engine:.0f} ms, but the load generator was late itself (event-loop lag p50 "
            f"{lag:.0f} ms{', run marked client-bound' if v.get('client_bound') else ''}): the "
            f"{outside:.0f} ms outside the engine cannot be split between the client, the "
            "network and the server's front end from this run.",
            evidence,
            ["rerun from a host (or with --workers) where the client keeps up: client_samples."
             "loop_lag_ms should stay in single milliseconds",
             "then compare to_headers_ms with the engine queue time: proxies buffering SSE?"])
    return Finding("ttft_outside_engine", "TTFT spent outside the engine", 0.7, "warning",
                   f"Client TTFT {client:.0f} ms is {client / max(engine, 1e-9):.1f}x the engine's "
                   f"own {engine:.0f} ms: {outside:.0f} ms go to network, proxies, "
                   "first-byte and detokenizer hold-back.", evidence,
                   ["compare to_headers_ms with the engine queue time: proxies buffering SSE?",
                    "check the client host: event-loop lag in client_samples"])


def slowdown_finding(dvr: DecodeVsRoofline) -> Finding | None:
    if not dvr.ratio >= SLOWDOWN_FINDING:
        return None
    return Finding("uniform_slowdown", "Uniformly slow decode (not a stall)", 0.7, "warning",
                   f"Every decode step is slow, not a few: {dvr.measured_ms:.1f} ms measured vs "
                   f"{dvr.roofline_ms:.1f} ms roofline at {dvr.decoders} decoders "
                   f"({dvr.ratio:.1f}x). A stall would be a few slow steps; this is the whole device.",
                   [Evidence("decode_step_vs_roofline", {"measured_ms": _r(dvr.measured_ms), "roofline_ms": _r(dvr.roofline_ms),
                             "ratio": _r(dvr.ratio), "decoders": dvr.decoders, "context_tokens": dvr.context,
                             "source": dvr.source}, dvr.sql)],
                   ["check clocks and throttle reasons, power and thermal caps (nvidia-smi -q -d PERFORMANCE)",
                    "check PCIe/NVLink link state and memory bandwidth with a microbenchmark"])
