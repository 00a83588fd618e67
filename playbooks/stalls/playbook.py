"""Playbook `stalls`: why the token stream stutters. Runbook: playbooks/stalls/stalls.md.

Order of checks: did the engine stop (hang) -> baseline ITL -> stall events -> cross-request test per event -> what the
engine did at that time (step log) -> periodicity of engine-wide pauses -> prefill
interference and head-of-line blocking -> TTFT split -> uniform slowdown vs the roofline.
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb
import numpy as np

from playbooks.clocks import cross_node_clocks
from playbooks.context import RunContext, load_context
from playbooks.findings import Diagnosis, Evidence
from playbooks.stalls import prefill as pf
from playbooks.stalls.engine_stopped import engine_stopped_finding
from playbooks.stalls.events import (
    DEFAULT_MIN_STALL_MS,
    Baseline,
    Events,
    Gaps,
    baseline,
    find_events,
    load_gaps,
)
from playbooks.stalls.findings import (
    engine_wide_finding,
    hol_finding,
    prefill_finding,
    private_finding,
    slowdown_finding,
    ttft_finding,
)
from playbooks.stalls.periodic_sources import Periodicity, rank_sources
from playbooks.stalls.server_view import decode_vs_roofline, ttft_split
from playbooks.stalls.tail import GapIndex, Tail, tokens_before

BIMODAL_NOTE = (
    "The cross-request test separates the two modes of a bimodal ITL histogram: a gap seen by "
    "every running request at the same wall time is the engine pausing (host stall, prefill "
    "step); a gap private to one request is that request being preempted or read slowly.")


@dataclass
class StallOptions:
    itl_target_ms: float = 50.0
    min_stall_ms: float = DEFAULT_MIN_STALL_MS
    model: str | None = None
    gpu: str | None = None

    def validate(self) -> None:
        if not self.itl_target_ms > 0:
            raise ValueError(f"itl_target_ms: must be > 0, got {self.itl_target_ms}")
        if not self.min_stall_ms >= 0:
            raise ValueError(f"min_stall_ms: must be >= 0, got {self.min_stall_ms}")


def diagnose_stalls(con: duckdb.DuckDBPyConnection, run_ref: str,
                    options: StallOptions | None = None) -> Diagnosis:
    opts = options or StallOptions()
    opts.validate()
    ctx = load_context(con, run_ref, {"model": opts.model, "gpu": opts.gpu})
    diag = Diagnosis("stalls", ctx.run_id, ctx.data_sources())
    diag.context["engine_setup"] = {"model": ctx.setup.model, "gpu": ctx.setup.gpu,
                                    "source": ctx.setup.source}
    diag.context["data_counts"] = ctx.counts
    diag.context["clocks"], clock_note = cross_node_clocks(con, ctx.run_id)
    if clock_note is not None:  # the cross-request test compares times across nodes
        diag.notes.append(clock_note)
    if not ctx.has_steps:
        diag.notes.append("No engine step log: causes are inferred from the client timeline "
                          "alone (record /engine/steps or a profiler trace to confirm them).")
    gaps = load_gaps(con, ctx.run_id)
    base = baseline(con, ctx.run_id, gaps, opts.min_stall_ms)
    # First: did the engine stop altogether? A hang leaves no gap to measure (the stranded
    # requests never got another token), so the stall checks below cannot see it.
    stopped = engine_stopped_finding(con, ctx.run_id, ctx.t0_ns, ctx.has_steps,
                                     base.p99_ms if base is not None else 0.0)
    if stopped is not None:
        diag.findings.append(stopped)
    if base is None:
        diag.notes.append("No inter-token gaps in this run (no request streamed two content "
                          "chunks): nothing to diagnose.")
        return diag
    diag.context["itl_baseline"] = base.values()
    diag.context["bimodal_itl"] = BIMODAL_NOTE
    ev = find_events(con, ctx.run_id, ctx.t0_ns, base, ctx.has_steps,
                     ctx.counts["client_samples"] > 0)
    prefill_tail = _stall_findings(con, ctx, base, gaps, ev, diag)
    _prefill_findings(con, ctx, opts, diag, prefill_tail)
    _server_findings(con, ctx, diag)
    return diag


def _windows(ev: Events, idx: np.ndarray) -> list[list[float]]:
    """Each event's [start, end] in seconds from the run's start: where its damage is counted."""
    return [[round(float(ev.ws[i]) / 1e9, 4), round(float(ev.we[i]) / 1e9, 4)] for i in idx]


def _periodicity(con: duckdb.DuckDBPyConnection, ctx: RunContext, ev: Events,
                 idx: np.ndarray, gaps: Gaps, base: Baseline) -> Periodicity:
    # When the pause began: the engine's own stamp of its long step where the step log has
    # it (a busy client's read times would add their noise to the seconds clock), else the
    # client's gap start. One entry per event in every clock (-1: no step known), so that one
    # grid can count the same periods in seconds, steps and tokens.
    client_start = ev.we[idx] - (ev.gap_ms[idx] * 1e6).astype(np.int64)
    engine_start = ev.covering_step_start_ns[idx]
    times_s = np.where(engine_start >= 0, engine_start, client_start) / 1e9
    step_ids = ev.covering_step_id[idx] if ctx.has_steps else None
    ordinary = gaps.itl_ms[gaps.itl_ms < base.threshold_ms] / 1e3
    return rank_sources(con, ctx.run_id, times_s, step_ids,
                        tokens_before(con, ctx.run_id, ev.first_start[idx]),
                        float(np.median(ev.n_active[idx])),
                        client_gaps_s=None if ctx.has_steps else ordinary)


def _stall_findings(con: duckdb.DuckDBPyConnection, ctx: RunContext, base: Baseline,
                    all_gaps: Gaps, ev: Events, diag: Diagnosis) -> tuple[int, Tail | None]:
    """Adds the engine-wide and private stall findings; returns the prefill-step events
    (count, tail share) for the prefill check."""
    kinds = {k: int(np.sum(ev.kind == k)) for k in ("engine_wide", "private", "undetermined")}
    causes = {str(c): int(np.sum(ev.cause == c)) for c in set(ev.cause.tolist())}
    diag.context["stall_events"] = {"threshold_ms": round(base.threshold_ms, 3), **kinds,
                                    "by_cause": causes}
    if not len(ev):
        return 0, None
    gaps = GapIndex(all_gaps, ev, base.threshold_ms)
    cross = Evidence("cross_request_test", {**kinds, "threshold_ms": round(base.threshold_ms, 2)},
                     ev.sql, "per event: requests streaming across it (n_active) vs those that "
                     "received a token during it (n_progressing); none progressing = engine-wide")
    client = np.flatnonzero(ev.cause == "client_pause")
    if len(client):
        diag.notes.append(
            f"{len(client)} gap event(s) (max {ev.max_gap_ms[client].max():.0f} ms) were the "
            "observer's own: the engine kept stepping or the client's event loop was stalled. "
            "They are not findings; see client_samples.loop_lag_ms.")
    pausing = np.isin(ev.cause, ["engine_pause", "unattributed"])
    wide = np.flatnonzero((ev.kind == "engine_wide") & pausing)
    if len(wide):
        per = _periodicity(con, ctx, ev, wide, all_gaps, base)
        # A pause while only one request streamed cannot pass the cross-request test
        # (undetermined), yet one that falls on the engine-wide pauses' period is the same
        # source seen through one stream: fitted together, those on the grid join the finding.
        lone = np.flatnonzero((ev.kind == "undetermined") & pausing)
        if len(lone):
            both = np.sort(np.concatenate([wide, lone]))
            joint = _periodicity(con, ctx, ev, both, all_gaps, base)
            fit = joint.primary
            if fit is not None and fit.significant:
                on_grid = set(both[fit.grid >= 0].tolist())
                extra = np.array([i for i in lone if i in on_grid], dtype=np.int64)
                if len(extra):
                    wide = np.sort(np.concatenate([wide, extra]))
                    per = _periodicity(con, ctx, ev, wide, all_gaps, base)
        diag.findings.append(engine_wide_finding(ev, wide, gaps, per, cross, base,
                                                 ctx.has_steps))
        diag.findings[-1].scope = {"windows_s": _windows(ev, wide)}
    private = np.flatnonzero((ev.kind == "private") & (ev.cause != "client_pause"))
    if len(private):
        diag.findings.append(private_finding(con, ctx, ev, private, gaps.tail(private), cross))
        diag.findings[-1].scope = {"windows_s": _windows(ev, private),
                                   "requests": sorted({int(r) for i in private for r in ev.stalled[i]})}
    pre = np.flatnonzero(ev.cause == "prefill")
    return len(pre), (gaps.tail(pre) if len(pre) else None)


def _prefill_findings(con: duckdb.DuckDBPyConnection, ctx: RunContext, opts: StallOptions,
                      diag: Diagnosis, prefill_events: tuple[int, Tail | None]) -> None:
    res = pf.analyse(con, ctx.run_id, ctx.has_steps)
    n_events, tail = prefill_events
    finding = prefill_finding(ctx, res, n_events, tail, opts.itl_target_ms)
    if finding is not None:
        diag.findings.append(finding)
    hol = hol_finding(res)
    if hol is not None:
        diag.findings.append(hol)


def _server_findings(con: duckdb.DuckDBPyConnection, ctx: RunContext, diag: Diagnosis) -> None:
    if ctx.has_metrics:
        split = ttft_split(con, ctx.run_id)
        if split.available:
            diag.context["ttft_split"] = {k: (round(v, 3) if isinstance(v, float) else v)
                                          for k, v in split.values.items()}
            f = ttft_finding(split)
            if f is not None:
                diag.findings.append(f)
    try:
        dvr = decode_vs_roofline(con, ctx.run_id, ctx.setup, ctx.has_steps)
    except ValueError as exc:  # an unknown model or GPU name: say so, do not fail the playbook
        diag.notes.append(f"roofline comparison skipped: {exc}")
        dvr = None
    if dvr is None:
        if not (ctx.setup.model and ctx.setup.gpu):
            diag.notes.append("Model or GPU unknown: pass --model and --gpu for the roofline "
                              "comparison and a roofline token budget.")
        return
    diag.context["decode_vs_roofline"] = {"measured_ms": round(dvr.measured_ms, 3),
                                          "roofline_ms": round(dvr.roofline_ms, 3),
                                          "ratio": round(dvr.ratio, 3), "source": dvr.source}
    f = slowdown_finding(dvr)
    if f is not None:
        diag.findings.append(f)
