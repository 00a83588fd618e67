"""Playbook `specdec`: what speculative decoding did in a run, and where it stopped paying.

Order: the counters' source (the run's scrapes, else its Prometheus pulls; none: the engine
did not speculate, said) -> increases over the intervals without a counter restart (each
restart said, as a finding) -> acceptance rate, mean accepted length, acceptance per draft
position -> tokens per step the clients saw (requests stopped at EOS left out) -> with a
baseline run without speculation, throughput per batch-size bucket on both, the speed-up
and the batch size above which speculation costs throughput.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import duckdb

from infbench.store import get_run
from playbooks.findings import Diagnosis, Evidence, Finding
from playbooks.specdec.counters import SpecTotals, pick_source, spec_totals
from playbooks.specdec.speedup import MIN_INTERVALS, bucket_label, speed_up, throughput_by_batch
from playbooks.specdec.streams import client_steps
from playbooks.sql import fetch_one

STEP_LOG_SQL = """
SELECT count(*) FILTER (WHERE spec_draft_tokens > 0) AS drafting_steps,
       sum(spec_draft_tokens) AS draft_tokens, sum(spec_accepted_tokens) AS accepted_tokens
FROM engine_steps
WHERE run_id = $run_id AND spec_draft_tokens IS NOT NULL
"""
LOW_ACCEPTANCE = 0.3   # below this share of draft tokens accepted, most drafts are wasted work
STEEP_DROP = 0.5       # a position accepted at less than half the rate of the one before


@dataclass
class SpecdecOptions:
    baseline: str | None = field(default=None, metadata={
        "help": "A run at the same load without speculation: compare throughput per batch size."})

    def validate(self) -> None:
        if self.baseline is not None and not self.baseline.strip():
            raise ValueError("baseline: give a run id, a unique prefix or 'last'")


def _r(x: float | None, digits: int = 4) -> float | None:
    return None if x is None else round(x, digits)


def _acceptance(t: SpecTotals) -> Finding:
    rate, length = t.acceptance_rate, t.mean_accepted_length
    pos_rates, cond = t.position_rates(), t.conditional_rates()
    low = rate is not None and rate < LOW_ACCEPTANCE
    steep = next((i for i in range(1, len(cond)) if cond[i] is not None and cond[i - 1]
                  and cond[i] < STEEP_DROP * cond[i - 1]), None)  # type: ignore[operator]  # both checked not None in the same condition
    k = t.num_speculative_tokens
    summary = (f"{rate:.1%} of {t.draft_tokens:.0f} draft tokens accepted; a drafted step yields "
               f"{length:.2f} tokens on average (of at most {k + 1})." if rate is not None and length
               else "Drafts were counted but no draft token was: nothing to rate.")
    actions = []
    if low:
        actions.append("Most drafts are rejected: this traffic does not repeat its context. "
                       "Lower num_speculative_tokens, or serve it without speculation.")
    if steep is not None:
        actions.append(f"Acceptance falls sharply at draft position {steep}: drafting more than "
                       f"{steep} token(s) mostly buys verification work (num_speculative_tokens={steep}).")
    actions.append("Compare with a run at the same load without speculation: "
                   "`infbench diagnose specdec RUN --baseline BASELINE_RUN`; "
                   "`infbench plan specdec` prices other K.")
    values = {"drafts": t.drafts, "draft_tokens": t.draft_tokens, "accepted_tokens": t.accepted,
              "acceptance_rate": _r(rate), "mean_accepted_length": _r(length),
              "num_speculative_tokens": k, "intervals_kept": t.intervals,
              "seconds_kept": round(t.kept_s, 3), "seconds_scraped": round(t.span_s, 3)}
    per_pos = {f"position_{i}": _r(r) for i, r in enumerate(pos_rates)}
    per_pos.update({f"given_previous_{i}": _r(c) for i, c in enumerate(cond)})
    return Finding(
        "spec_low_acceptance" if low else "spec_acceptance",
        "Speculative decoding: most drafts rejected" if low else "Speculative decoding acceptance",
        0.95 if t.intervals >= 3 else 0.6, "warning" if low else "info", summary,
        [Evidence("spec_decode_counters", values, t.sql,
                  note="increases of vllm:spec_decode_* between snapshots, intervals with a "
                       "counter restart left out"),
         Evidence("acceptance_per_position", per_pos, t.sql,
                  note="position_i: accepted at draft position i per draft; given_previous_i: "
                       "the same per draft accepted at position i-1")],
        actions)


def _resets(t: SpecTotals) -> Finding:
    spans = ", ".join(f"{r.start_s:.2f}-{r.end_s:.2f} s" + (f" ({r.replica})" if r.replica else "")
                      for r in t.resets)
    first = t.resets[0]
    return Finding(
        "spec_counter_reset", "Speculative decoding counters restarted during the run", 0.9,
        "warning",
        f"{len(t.resets)} interval(s) between snapshots contain a counter restart (the engine "
        f"restarted): {spans}. They were left out; the rates use the {t.intervals} other intervals.",
        [Evidence("counter_resets", {"resets": len(t.resets), "first_counter": first.counter,
                                     "first_before": first.before, "first_after": first.after,
                                     "first_start_s": round(first.start_s, 3),
                                     "first_end_s": round(first.end_s, 3)}, t.sql)],
        ["Find why the engine restarted in the run (`infbench diagnose startup`, its logs)."],
        scope={"windows_s": [[round(r.start_s, 3), round(r.end_s, 3)] for r in t.resets]})


def _versus_baseline(con: duckdb.DuckDBPyConnection, run_id: str, source: str,
                     baseline_ref: str, diag: Diagnosis) -> None:
    base = get_run(con, baseline_ref)
    if base.run_id == run_id:
        raise ValueError("baseline: it is the run itself; give a run without speculation")
    base_source, _ = pick_source(con, base.run_id)
    if base_source is not None and spec_totals(con, base.run_id, base_source).draft_tokens > 0:
        raise ValueError(f"baseline: run {base.run_id} drafted tokens too; give a run without "
                         "speculation")
    spec = throughput_by_batch(con, run_id, source)
    plain = throughput_by_batch(con, base.run_id, source if base_source is None else base_source)
    su = speed_up(spec, plain)
    diag.context["baseline"] = base.run_id
    if not su.rows:
        diag.notes.append(f"baseline {base.run_id}: no batch-size bucket has {MIN_INTERVALS} scrape "
                          "intervals on both runs; nothing to compare (scrape more often: "
                          "--scrape-interval)")
        return
    values: dict[str, float | int | str | None] = {}
    for b, s, n, ratio in su.rows:
        label = bucket_label(b)
        values[f"batch_{label}_tok_s"] = round(s, 1)
        values[f"batch_{label}_baseline_tok_s"] = round(n, 1)
        values[f"batch_{label}_speedup"] = round(ratio, 3)
    evidence = [Evidence("throughput_by_batch", values, spec.sql,
                         note="per bucket: generated tokens over seconds between scrapes, this "
                              "run; the baseline's rows come from the next query"),
                Evidence("baseline_scrapes", {"baseline": base.run_id,
                                              "resets_left_out": plain.resets}, plain.sql)]
    best = max(su.rows, key=lambda r: r[3])
    if su.costs_above is None:
        diag.findings.append(Finding(
            "spec_pays", "Speculation paid at every batch size compared", 0.8, "info",
            f"Against {base.run_id}, speculation raised throughput in every bucket compared "
            f"(batch {bucket_label(su.rows[0][0])} to {bucket_label(su.rows[-1][0])}), most at "
            f"batch {bucket_label(best[0])}: x{best[3]:.2f}.", evidence,
            ["Larger batches than these were not seen in both runs; a load that reaches them "
             "tells where speculation stops paying."]))
        return
    b = su.costs_above
    ratio = next(r[3] for r in su.rows if r[0] == b)
    diag.findings.append(Finding(
        "spec_costs_throughput", f"Speculation costs throughput above batch size {b}", 0.85
        if su.monotonic else 0.6, "warning",
        f"Against {base.run_id}: x{best[3]:.2f} at batch {bucket_label(best[0])}, but x{ratio:.2f} "
        f"at batch {bucket_label(b)} and above{'' if su.monotonic else ' (not in every bucket above)'}: "
        f"verifying K+1 tokens per sequence makes a large batch's step compute-bound.",
        evidence,
        [f"Turn speculation off above {b} running requests (vLLM: "
         "speculative_config's disable_by_batch_size), or lower num_speculative_tokens; "
         "`infbench plan specdec` gives the K per batch size."],
        scope={"batch_size_from": b}))


def _step_log_evidence(con: duckdb.DuckDBPyConnection, run_id: str, finding: Finding) -> None:
    # The bundled engine logs each step's drafted and accepted tokens: the same acceptance
    # from the engine's own record (a step log restarted with its engine is read from where
    # the scraper had got to, so a restart leaves its first steps out).
    sql, (steps, drafted, accepted) = fetch_one(con, STEP_LOG_SQL, run_id=run_id)
    if not drafted:
        return
    finding.evidence.append(Evidence(
        "engine_step_log", {"drafting_steps": int(steps), "draft_tokens": int(drafted),
                            "accepted_tokens": int(accepted),
                            "acceptance_rate": _r(accepted / drafted)}, sql,
        note="the engine's own step log as scraped; after an engine restart its first steps "
             "are not (the step ids start again)"))


def diagnose_specdec(con: duckdb.DuckDBPyConnection, run_ref: str,
                     options: SpecdecOptions | None = None) -> Diagnosis:
    opts = options or SpecdecOptions()
    opts.validate()
    run = get_run(con, run_ref)
    source, sources_sql = pick_source(con, run.run_id)
    diag = Diagnosis("specdec", run.run_id, {"server_metrics": source is not None})
    diag.context = {"no_findings": "No findings: the run's scrapes and Prometheus pulls carry no "
                                   "vllm:spec_decode_* counter (the engine did not speculate)."}
    if source is None:
        diag.notes.append(f"no speculative decoding counters ({sources_sql})")
        return diag
    totals = spec_totals(con, run.run_id, source)
    diag.context["source"] = source
    if totals.resets:
        diag.findings.append(_resets(totals))
    if totals.drafts > 0:
        finding = _acceptance(totals)
        steps = client_steps(con, run.run_id)
        finding.evidence.append(Evidence(
            "client_tokens_per_step", {
                "tokens_per_step": _r(steps.tokens_per_step), "requests_used": steps.used,
                "stopped_at_eos_left_out": steps.stopped_at_eos, "requests": steps.finished},
            steps.sql, note="(output tokens - 1) / (content events - 1) over requests that "
                            "stopped at their length limit: a step cut at EOS is not a full step"))
        _step_log_evidence(con, run.run_id, finding)
        diag.findings.append(finding)
    else:
        diag.notes.append("the counters exist but no draft was counted in the intervals kept")
    if opts.baseline is not None:
        _versus_baseline(con, run.run_id, source, opts.baseline, diag)
    return diag
