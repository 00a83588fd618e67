"""Playbook `mbu`: decode memory-bandwidth utilisation, computed right, and where the rest of
the step time goes. Runbook: playbooks/mbu/mbu.md.

Order: resolve the run (or the run a trace is linked to) and the engine setup -> decode steps
with their batch and contexts -> MBU -> the missing share in buckets (from a linked trace
when there is one, else estimated from the step log) -> which dashboard mistake explains a
reported figure (`reported`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import duckdb
import numpy as np

from infbench.store import StoreError, get_run
from playbooks.findings import Diagnosis, Evidence, Finding
from playbooks.mbu.compute import MbuResult, compute, padded_batch
from playbooks.mbu.mistakes import RunFacts, classify, nearest
from playbooks.mbu.setup import ByteModel, MbuSetup, byte_model, resolve_setup
from playbooks.mbu.steps import DecodeSteps, load_steps
from playbooks.mbu.trace import TraceBuckets, linked_traces, trace_buckets
from playbooks.sql import fetch

BUCKET_WORDS = {
    "kernel_efficiency": "kernels move the bytes slower than the datasheet bandwidth",
    "host_launch_overhead": "fixed per-step host time: scheduling, sampling, launches, sync",
    "gaps_between_kernels": "the GPU idles between the step's kernels",
    "padding": "padded rows of CUDA-graph batches",
    "unexplained": "time the step-log fit does not account for (stalls, jitter)",
}
ACTIONS = {
    "kernel_efficiency": "Profile the decode kernels (nsys / torch profiler): attention and "
                         "GEMV bandwidth, kernel choice for this batch size and format; check "
                         "clocks and HBM throttling (`nvidia-smi -q -d PERFORMANCE`).",
    "host_launch_overhead": "Reduce per-step host work: CUDA graphs for decode, async "
                            "scheduling, fewer Python-side steps per token; check the CPU is "
                            "not shared or throttled.",
    "gaps_between_kernels": "Capture decode in CUDA graphs (or a larger capture range) so "
                            "kernels launch back to back; look for host syncs between kernels.",
    "padding": "Add capture sizes near the batch sizes the engine really runs.",
    "unexplained": "Run `infbench diagnose stalls` on the run: stalls and jitter land here.",
}

RUN_SQL = """
SELECT (SELECT avg(tpot_ms) FROM request_latency
        WHERE run_id = $run_id AND error_class IS NULL AND tpot_ms IS NOT NULL) AS tpot_ms,
       (SELECT avg(e2e_ms / output_tokens) FROM request_latency
        WHERE run_id = $run_id AND error_class IS NULL AND output_tokens > 0) AS e2e_per_token_ms,
       (SELECT count(*) FROM engine_steps WHERE run_id = $run_id) AS steps
"""


@dataclass
class MbuOptions:
    reported: float | None = None     # the dashboard's figure, 0..1 (or a percentage > 1)
    model: str | None = None
    gpu: str | None = None
    tensor_parallel_size: int | None = None
    trace: str | None = None          # a trace id to use instead of the run's latest linked one
    overrides: dict[str, Any] = field(default_factory=dict)

    def validate(self) -> None:
        if self.reported is not None:
            if not self.reported > 0:
                raise ValueError(f"--reported must be > 0, got {self.reported:g}")
            if self.reported > 1:
                self.reported /= 100.0  # 60 means 60%
            if self.reported > 1:
                raise ValueError("--reported must be a fraction (0.6) or a percentage (60)")
        if self.tensor_parallel_size is not None and self.tensor_parallel_size < 1:
            raise ValueError("--tp must be >= 1")


def _resolve(con: duckdb.DuckDBPyConnection, ref: str, options: MbuOptions) -> tuple[str, str | None]:
    """(run_id, trace_id): `ref` is a run, or a trace linked to a run."""
    row = con.execute("SELECT trace_id, run_id FROM traces WHERE trace_id = ? OR "
                      "(length(?) >= 8 AND starts_with(trace_id, ?))", [ref, ref, ref]).fetchall()
    if row:
        trace_id, run_id = row[0]
        if run_id is None:
            raise ValueError(f"trace {trace_id} is not linked to a run: import it with "
                             "`infbench trace import PATH --run RUN` (the run gives the model, "
                             "GPU and the bytes of each step)")
        return str(run_id), str(trace_id)
    try:
        return get_run(con, ref).run_id, options.trace
    except StoreError as exc:
        raise ValueError(str(exc).splitlines()[0]) from None


def diagnose_mbu(con: duckdb.DuckDBPyConnection, ref: str, options: MbuOptions | None = None) -> Diagnosis:
    options = options or MbuOptions()
    options.validate()
    run_id, trace_id = _resolve(con, ref, options)
    run = get_run(con, run_id)
    setup = resolve_setup(run.config, run.model, {
        "model": options.model, "gpu": options.gpu,
        "tensor_parallel_size": options.tensor_parallel_size, **options.overrides})
    bm = byte_model(setup)
    run_sql, rows = fetch(con, RUN_SQL, run_id=run_id)
    tpot_ms, e2e_tok_ms, nsteps = rows[0]
    if not nsteps:
        raise ValueError(f"run {run_id} has no engine step log (engine_steps): MBU needs each "
                         "decode step's duration and batch (the reference engine's /engine/steps)")
    steps = load_steps(con, run_id, int(run.t0_monotonic_ns or 0), bm)
    res = compute(steps, bm, setup.capture_sizes)
    pad_rows = padded_batch(steps.batch, setup.capture_sizes) - steps.batch
    pad_bytes = pad_rows * bm.kv_bytes_per_token + bm.weights(steps.batch + pad_rows) - bm.weights(steps.batch)
    traces_sql, linked = linked_traces(con, run_id)
    tb = None
    use = trace_id or next((t[0] for t in linked if t[3] > 0), None)
    if use is not None:
        tb = trace_buckets(con, use, steps.step_id, steps.bytes, pad_bytes, bm.peak_bandwidth)
    diag = Diagnosis("mbu", run_id, data_sources={
        "engine_steps": True, "client_timeline": steps.matched > 0,
        "trace": tb is not None})
    diag.context = {"mbu": res.mbu, "setup": {"model": bm.model_name, "gpu": bm.gpu_name,
                                              "tp": setup.tp, "weight_format": setup.weight_format,
                                              "kv_format": setup.kv_format, "source": setup.source},
                    "buckets": tb.buckets if tb else res.buckets,
                    "buckets_source": "trace" if tb else "step log fit"}
    diag.findings.append(_mbu_finding(res, steps, bm, setup))
    diag.findings.append(_bucket_finding(res, tb, steps))
    if options.reported is not None:
        facts = RunFacts(mbu=res.mbu, weight_share=res.weight_share, tp=setup.tp,
                         bytes_per_param=bm.bytes_per_param,
                         achievable_fraction=bm.achievable_fraction,
                         decode_step_s=res.mean_step_ms / 1e3,
                         tpot_s=tpot_ms / 1e3 if tpot_ms else None,
                         e2e_per_token_s=e2e_tok_ms / 1e3 if e2e_tok_ms else None,
                         mean_batch=res.mean_batch, max_num_seqs=setup.max_num_seqs,
                         concurrency=(run.config.get("arrivals") or {}).get("concurrency"))
        diag.findings.append(_mistake_finding(options.reported, facts, run_sql))
    if steps.coverage < 0.9:
        diag.notes.append(f"contexts reconstructed for {steps.coverage:.0%} of the decoding "
                          "sequences the step log counts; the rest are taken at the average")
    if steps.preemptions:
        diag.notes.append(f"{steps.preemptions} preemptions: recomputed sequences make the "
                          "reconstructed contexts approximate around them")
    if linked and use is None:
        diag.notes.append(f"trace {linked[0][0]} is linked but has no GPU ops (a CPU-only "
                          "profile): the buckets come from the step log")
    if use is not None and tb is None:
        diag.notes.append(f"trace {use} is linked but none of its annotated steps "
                          "(engine_step#N) with GPU ops matches a decode step of the log")
    return diag


def _pct(x: float) -> float:
    return round(100.0 * x, 2)


def _mbu_finding(res: MbuResult, steps: DecodeSteps, bm: ByteModel, setup: MbuSetup) -> Finding:
    achievable = res.mbu / bm.achievable_fraction
    sev = "info" if res.mbu >= 0.5 * bm.achievable_fraction else "warning"
    return Finding(
        verdict="decode_mbu", title=f"Decode MBU {res.mbu:.1%} of the datasheet bandwidth",
        confidence=min(1.0, 0.5 + 0.5 * steps.coverage), severity=sev,
        summary=(f"Over {res.steps} decode steps ({res.decode_time_s:.2f} s), {bm.model_name} "
                 f"on {bm.gpu_name} (TP {setup.tp}) moved {res.bytes_per_step / 1e9:.2f} GB per "
                 f"step per GPU in {res.mean_step_ms:.2f} ms on average: "
                 f"{res.achieved_bandwidth / 1e12:.2f} TB/s, {res.mbu:.1%} of the datasheet "
                 f"{bm.peak_bandwidth / 1e12:.2f} TB/s ({achievable:.1%} of the "
                 f"{bm.achievable_fraction:.0%} a tuned decode reaches)."),
        evidence=[
            Evidence("decode_steps", {"steps": res.steps, "mixed_prefill_steps": steps.mixed_steps,
                                      "all_steps": steps.all_steps,
                                      "mean_step_ms": round(res.mean_step_ms, 3),
                                      "mean_batch": round(res.mean_batch, 2),
                                      "mean_context_tokens": round(res.mean_context, 1)},
                     steps.sql, "one row per step: its time, batch, and the contexts of the "
                     "sequences decoding in it (reconstructed from the client's token stamps)"),
            Evidence("bytes_per_step", {"weights_gb": round(float(steps.weight_bytes.mean()) / 1e9, 4),
                                        "kv_gb": round(float(steps.kv_bytes.mean()) / 1e9, 4),
                                        "weight_share": round(res.weight_share, 4),
                                        "kv_bytes_per_token_per_gpu": bm.kv_bytes_per_token,
                                        "weight_format": setup.weight_format,
                                        "kv_format": setup.kv_format},
                     None, "infbench.specs: weights read per step on one GPU + every sequence's "
                     "whole context of KV (`infbench plan kv` shows the per-token figure)"),
            Evidence("mbu", {"mbu_pct": _pct(res.mbu), "of_achievable_pct": _pct(achievable),
                             "achieved_tb_s": round(res.achieved_bandwidth / 1e12, 4),
                             "datasheet_tb_s": bm.peak_bandwidth / 1e12,
                             "step_mbu_p10_pct": _pct(res.step_mbu_p10),
                             "step_mbu_p50_pct": _pct(res.step_mbu_p50),
                             "step_mbu_p90_pct": _pct(res.step_mbu_p90)},
                     None, "sum of bytes / sum of step time / datasheet bandwidth"),
            Evidence("context_reconstruction", {"matched_sequences": steps.matched,
                                                "logged_sequences": steps.logged,
                                                "coverage_pct": _pct(steps.coverage)}, None,
                     "decoding sequences found from the client's record vs the step log's count"),
        ],
        next_actions=["Compare with the dashboard's figure: `infbench diagnose mbu RUN "
                      "--reported 0.60` names the mistake that explains a different one."])


def _bucket_finding(res: MbuResult, tb: TraceBuckets | None, steps: DecodeSteps) -> Finding:
    buckets = tb.buckets if tb else res.buckets
    top = max(buckets, key=lambda k: buckets[k])
    missing = 1.0 - res.mbu
    ev = []
    if tb:
        ev.append(Evidence("trace_steps", {"trace_id": tb.trace_id, "steps": tb.steps,
                                           "step_time_s": round(tb.step_time_s, 4),
                                           "gpu_busy_s": round(tb.busy_s, 4),
                                           "gpu_span_s": round(tb.span_s, 4),
                                           "kernel_tb_s": round(tb.kernel_bandwidth / 1e12, 4)},
                           tb.sql, "per traced step: annotation length, union of its GPU ops, "
                           "first op start to last op end"))
    fit = res.fit
    ev.append(Evidence("step_time_fit", {
        "intercept_ms": round(fit.get("intercept_s", float("nan")) * 1e3, 4)
        if np.isfinite(fit.get("intercept_s", np.nan)) else None,
        "achieved_tb_s": round(fit["achieved_bandwidth"] / 1e12, 4)
        if np.isfinite(fit.get("achieved_bandwidth", np.nan)) else None,
        "slope_rel_se": round(fit["slope_rel_se"], 4) if np.isfinite(fit["slope_rel_se"]) else None,
        "r2": round(fit["r2"], 4), "bytes_cv": round(fit["bytes_cv"], 4),
        "separable": res.separable, "padded_rows_pct": _pct(fit.get("padded_rows_share", 0.0))},
        steps.sql, "least squares step time = fixed + bytes / achieved bandwidth over the decode steps"))
    ev.append(Evidence("buckets", {**{f"{k}_pct": _pct(v) for k, v in buckets.items()},
                                   "mbu_pct": _pct(res.mbu), "source": "trace" if tb else "step log"},
                       None, "shares of decode step time; with MBU they add up to 100%"))
    if not tb and not res.separable:
        return Finding(
            verdict="mbu_missing_unresolved", title="Where the missing bandwidth goes needs a trace",
            confidence=0.4, severity="info",
            summary=(f"{missing:.0%} of decode step time is not spent moving bytes at the "
                     "datasheet rate, but the step log cannot split it: the steps' bytes hardly "
                     f"vary (CV {fit['bytes_cv']:.1%}), so kernel speed and fixed per-step time "
                     "look the same."),
            evidence=ev, next_actions=[
                "Capture a trace of a few decode steps (torch profiler or nsys), import it with "
                "`infbench trace import PATH --run RUN` and diagnose again.",
                "Or record a run whose contexts vary more (longer, mixed prompt lengths)."])
    share = buckets[top]
    return Finding(
        verdict=f"mbu_lost_to_{top}", title=f"Most of the missing bandwidth: {top.replace('_', ' ')}",
        confidence=0.85 if tb else 0.6, severity="warning" if share >= 0.2 else "info",
        summary=(f"Of the {missing:.0%} of decode step time not spent moving bytes at the "
                 f"datasheet rate, the largest part ({share:.0%} of step time) is "
                 f"{top.replace('_', ' ')}: {BUCKET_WORDS[top]}"
                 + (" (measured in the trace)." if tb else " (estimated from the step log; a "
                    "trace confirms it).")),
        evidence=ev, next_actions=[ACTIONS[top]])


def _mistake_finding(reported: float, facts: RunFacts, run_sql: str) -> Finding:
    hits = classify(reported, facts)
    ev = [Evidence("reported_vs_correct", {"reported_pct": _pct(reported), "correct_pct": _pct(facts.mbu),
                                           "tpot_ms": round(facts.tpot_s * 1e3, 3) if facts.tpot_s else None,
                                           "decode_step_ms": round(facts.decode_step_s * 1e3, 3)},
                   run_sql, "TPOT and e2e per token from request_latency")]
    for c, err in hits[:4]:
        ev.append(Evidence(f"candidate_{c.mistake}", {"predicted_pct": _pct(c.predicted),
                                                       "relative_error_pct": _pct(err)}, None, c.detail))
    if not hits:
        c, err = nearest(reported, facts)
        ev.append(Evidence("nearest_candidate", {"mistake": c.mistake, "predicted_pct": _pct(c.predicted),
                                                  "relative_error_pct": _pct(err)}, None, c.detail))
        return Finding("reported_unexplained", "No single dashboard mistake explains the figure", 0.5,
                       "warning", f"The dashboard's {reported:.1%} is not the correct {facts.mbu:.1%} "
                       "and no known mistake (alone or one denominator with one numerator) gives it "
                       "within 3%.", ev, ["Ask how the dashboard computes bytes, step time and the "
                                          "bandwidth it divides by; compare with the evidence here."])
    best, err = hits[0]
    if best.mistake == "correct":
        return Finding("reported_matches", "The dashboard's figure is right", 0.9, "info",
                       f"{reported:.1%} is within {err:.1%} of the correct {facts.mbu:.1%}.", ev, [])
    also = [c.mistake for c, _ in hits[1:] if c.mistake != best.mistake]
    return Finding(
        f"dashboard_{best.mistake.replace('+', '_and_')}",
        f"The dashboard's {reported:.0%}: {best.mistake.replace('_', ' ').replace('+', ' + ')}",
        max(0.3, 0.9 - 0.2 * len(also)), "warning",
        f"The correct decode MBU is {facts.mbu:.1%}; {reported:.1%} is what one gets if one "
        f"{best.detail} (predicted {best.predicted:.1%})."
        + (f" Also consistent: {', '.join(also)}." if also else ""),
        ev, ["Fix the dashboard's formula: bytes per decode step (weights per GPU + KV for the "
             "actual contexts) / decode step time / datasheet bandwidth."])
