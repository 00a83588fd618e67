"""Playbook `replicas`: which replica drags the fleet, and why. Runbook:
playbooks/replicas/replicas.md.

Order: the run's replicas (a fleet run's `requests.replica`; a one-URL run gets the
measurement plan instead) -> every replica against its peers at matched load (slower vs
busier) -> for a slower one, its share of the fleet's tail -> the hardware walk over its GPU
telemetry against its peers' (clocks and throttle reasons, power and thermal, PCIe, errors).
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass, field

import duckdb

from playbooks.context import load_context
from playbooks.findings import Diagnosis, Evidence, Finding
from playbooks.replicas.compare import METRIC_WORDS, ReplicaVerdict, judge
from playbooks.replicas.engine_time import (
    engine_evidence,
    engine_reason,
    outside_engine,
    refutation,
)
from playbooks.replicas.errors import ReplicaErrors, failing_replicas
from playbooks.replicas.fleet_tail import TailEffect, tail_effect
from playbooks.replicas.hardware import Walk, hardware_walk
from playbooks.replicas.matched import BIN_WIDTH
from playbooks.replicas.observations import Observations, load_observations
from playbooks.replicas.plan import measurement_plan
from playbooks.sql import fetch_one

GPU_SQL = "SELECT count(*) FROM gpu_samples WHERE run_id = $run_id AND instance IS NOT NULL"
ATTRIBUTION_SQL = """
SELECT count(*) FILTER (replica IS NOT NULL) AS with_replica, count(*) AS requests,
       count(DISTINCT replica) AS replicas
FROM requests WHERE run_id = $run_id
"""
# The tail metric a slower metric shows in (an engine step is a decode token's time).
TAIL_OF = {"ttft": "ttft", "tpot": "tpot", "step": "tpot"}


@dataclass
class ReplicaOptions:
    min_effect: float = 0.10      # slower by at least this much at matched load
    busier_ratio: float = 1.25    # sent this many times the peers' requests, or their load
    alpha: float = 0.05           # for the intervals, Bonferroni over replicas x metrics
    db: str = "infbench.duckdb"   # named in the measurement plan's commands
    replica_urls: list[str] = field(default_factory=list)  # the plan's replicas, when known

    def validate(self) -> None:
        if not 0.0 < self.min_effect < 10.0:
            raise ValueError(f"--min-effect must be in (0, 10), got {self.min_effect:g}")
        if not self.busier_ratio > 1.0:
            raise ValueError(f"--busier-ratio must be > 1, got {self.busier_ratio:g}")
        if not 0.0 < self.alpha < 0.5:
            raise ValueError(f"alpha must be in (0, 0.5), got {self.alpha:g}")


def diagnose_replicas(con: duckdb.DuckDBPyConnection, run_ref: str,
                      options: ReplicaOptions | None = None) -> Diagnosis:
    options = options or ReplicaOptions()
    options.validate()
    ctx = load_context(con, run_ref)
    fleet = ctx.config.get("fleet") or {}
    order = [str(r.get("name")) for r in fleet.get("replicas", [])]
    obs = load_observations(con, ctx.run_id, order)
    gsql, grow = fetch_one(con, GPU_SQL, run_id=ctx.run_id)
    diag = Diagnosis("replicas", ctx.run_id, data_sources={
        **ctx.data_sources(), "replicas": bool(obs.replicas), "gpu_samples": bool(grow and grow[0])})
    asql, arow = fetch_one(con, ATTRIBUTION_SQL, run_id=ctx.run_id)
    if not arow or not arow[0]:  # no request knows its replica: a one-URL run
        diag.findings.append(_unknown_replica(ctx.config, options, asql, arow))
        return diag
    aliases = _aliases(fleet)
    failing, esql = failing_replicas(con, ctx.run_id)
    for e in failing:
        peers = [r for r in obs.replicas if r != e.replica] or [r for r in order if r != e.replica]
        diag.findings.append(_failing(e, esql, hardware_walk(con, ctx.run_id, e.replica, peers, aliases)))
        diag.findings[-1].scope = {"replica": e.replica}
    if len(obs.replicas) < 2:
        diag.notes.append(f"{len(obs.replicas)} replica(s) with successful measured requests: "
                          "no latency comparison at matched load")
        return diag
    verdicts, z = judge(obs, options.min_effect, options.busier_ratio, options.alpha)
    failed = {e.replica for e in failing}
    diag.context = {"replicas": [{**_row(v, z), "failing": v.replica in failed} for v in verdicts],
                    "z": round(z, 3),
                    "min_effect": options.min_effect, "load_bin_width": BIN_WIDTH}
    for v in verdicts:
        thin = [m for m, c in v.comparisons.items() if c.delta is None]
        if thin:
            diag.notes.append(f"{v.replica}: too few requests at loads its peers also saw to compare "
                              f"{', '.join(METRIC_WORDS[m] for m in thin)}")
    for r, t in sorted((obs.engine_time or {}).items()):
        if t.steps_missing:
            diag.notes.append(f"{r}: its stored step log misses {t.steps_missing} step(s) between its "
                              "first and last (the engine's step buffer overflowed between polls), so "
                              "its engine's time before first tokens is not compared")
    for v in verdicts:
        if v.refuted_on and not v.busier:
            diag.notes.append(outside_engine(v, z))
    for v in verdicts:
        if v.slower:
            tails = {m: tail_effect(con, ctx.run_id, v.replica, m) for m in ("ttft", "tpot", "e2e")}
            walk = hardware_walk(con, ctx.run_id, v.replica, v.peers, aliases)
            slower = _slower(v, z, tails, walk, obs, options)
            diag.findings.append(slower)
            diag.findings.append(_hardware(v, walk, slower))
        elif v.busier:
            diag.findings.append(_busier(v, z, obs, options))
        else:
            continue
        for f in diag.findings[-2 if v.slower else -1:]:
            f.scope = {"replica": v.replica}
    return diag


def _aliases(fleet: dict) -> dict[str, str]:
    """host:port of each replica's URL and dcgm-exporter -> its name (a Prometheus pull names
    a series by the scrape target's host:port)."""
    out: dict[str, str] = {}
    for r in fleet.get("replicas", []):
        for key in ("url", "gpu_metrics_url"):
            netloc = urllib.parse.urlsplit(str(r.get(key) or "")).netloc
            if netloc and r.get("name") and netloc != r["name"]:
                out.setdefault(netloc, str(r["name"]))
    return out


def _pct(x: float) -> str:
    return f"{x - 1:+.0%}"


def _row(v: ReplicaVerdict, z: float) -> dict[str, object]:
    out: dict[str, object] = {"replica": v.replica, "slower": v.slower, "busier": v.busier,
                              "refuted_on": list(v.refuted_on), "refuted_by": v.refuted_by or None,
                              "load_ratio": v.load_ratio, "request_ratio": v.request_ratio,
                              "queue_wait_ms": v.engine.queue_wait_ms if v.engine else None,
                              "prefill_ms": v.engine.prefill_ms if v.engine else None}
    for m, c in v.comparisons.items():
        iv = c.interval(z)
        out[f"{m}_ratio"] = c.ratio()
        out[f"{m}_interval"] = list(iv) if iv else None
    return out


def _cmp_evidence(v: ReplicaVerdict, z: float, obs: Observations) -> list[Evidence]:
    ev = []
    for m, c in v.comparisons.items():
        iv, ratio = c.interval(z), c.ratio()
        ev.append(Evidence(f"{m}_at_matched_load", {
            "ratio": None if ratio is None else round(ratio, 4),
            "interval_low": None if iv is None else round(iv[0], 4),
            "interval_high": None if iv is None else round(iv[1], 4),
            "unmatched_median_ratio": None if c.raw_ratio is None else round(c.raw_ratio, 4),
            "load_ratio": None if c.load_ratio is None else round(c.load_ratio, 4),
            "replica_observations": c.n_replica, "peer_observations": c.n_peers,
            "load_bins": c.bins, "coverage": round(c.coverage, 4), "peers": ",".join(v.peers)},
            obs.steps_sql if m == "step" else obs.requests_sql,
            f"log {METRIC_WORDS[m]} on load within ~{BIN_WIDTH:.0%}-wide load bins, the replica "
            "against its peers; interval cluster-robust by replica-second, Bonferroni over "
            "replicas x metrics"))
    return ev


def _load_words(v: ReplicaVerdict, busier_ratio: float) -> str:
    """What a slower replica was given: busier by either measure is said, and set aside."""
    clauses = ([f"it was sent {v.request_ratio:.2f}x its peers' requests"] if v.request_ratio is not None
               else []) + ([f"its requests met {v.load_ratio:.2f}x their load"] if v.load_ratio is not None
                           else [])
    if not clauses:
        return ""
    said = " and ".join(clauses)
    if any(x is not None and x >= busier_ratio for x in (v.request_ratio, v.load_ratio)):
        return f"{said[0].upper()}{said[1:]}: busier, but the comparison is at equal load. "
    return f"It is not busier: {said}. "


def _slower(v: ReplicaVerdict, z: float, tails: dict[str, TailEffect], walk: Walk,
            obs: Observations, options: ReplicaOptions) -> Finding:
    # Headline: the metric whose interval shows the largest slowdown at its low end.
    worst = max(v.slower_on, key=lambda m: (v.comparisons[m].interval(z) or (0.0, 0.0))[0])
    c = v.comparisons[worst]
    tail = tails[TAIL_OF[worst]]
    what = ", ".join(f"{METRIC_WORDS[m]} {v.comparisons[m].describe(z)}" for m in v.slower_on)
    load = _load_words(v, options.busier_ratio)
    tail_txt = ""
    if tail.share_above_p99 is not None and tail.share_of_requests:
        tail_txt = (f"It served {tail.share_of_requests:.0%} of the requests and "
                    f"{tail.share_above_p99:.0%} of those above the fleet's p99 {METRIC_WORDS[tail.metric]}"
                    + (f" ({tail.share_above_p90:.0%} of those above its p90)"
                       if tail.share_above_p90 is not None else "")
                    + (f"; without it the fleet p99 would be {tail.p99_reduction:.0%} lower "
                       f"({tail.fleet_p99_ms:.1f} -> {tail.p99_without_ms:.1f} ms)."
                       if tail.p99_reduction is not None else "."))
    engine_txt = engine_reason(v)
    cause = walk.cause
    cause_txt = (f" Telemetry: {cause.detail}." if cause else
                 " Its GPU telemetry shows nothing its peers do not." if walk.has_telemetry else
                 " No GPU telemetry was recorded for it.")
    big = ((tail.share_above_p99 or 0) >= 0.5 or (tail.p99_reduction or 0) >= 0.2
           or (tail.share_above_p90 or 0) >= 0.6)
    ev = _cmp_evidence(v, z, obs)
    ev.extend(engine_evidence(v, obs))
    for m, t in tails.items():
        ev.append(Evidence(f"fleet_p99_{m}", {
            "fleet_p99_ms": None if t.fleet_p99_ms is None else round(t.fleet_p99_ms, 3),
            "p99_without_replica_ms": None if t.p99_without_ms is None else round(t.p99_without_ms, 3),
            "share_of_requests": None if t.share_of_requests is None else round(t.share_of_requests, 4),
            "share_above_fleet_p99": None if t.share_above_p99 is None else round(t.share_above_p99, 4),
            "requests_above_fleet_p99": t.above_p99,
            "fleet_p90_ms": None if t.fleet_p90_ms is None else round(t.fleet_p90_ms, 3),
            "p90_without_replica_ms": None if t.p90_without_ms is None else round(t.p90_without_ms, 3),
            "share_above_fleet_p90": None if t.share_above_p90 is None else round(t.share_above_p90, 4)},
            t.sql,
            f"{METRIC_WORDS.get(m, m)} of measured, successful requests"))
    # Clear when even the interval's low end keeps half the estimated slowdown.
    lo = c.interval(z)
    confidence = 0.9 if lo and lo[0] - 1 >= ((c.ratio() or 1.0) - 1) / 2 else 0.7
    return Finding(
        verdict="replica_slower",
        title=f"Replica {v.replica} is slower at equal load ({METRIC_WORDS[worst]} {_pct(c.ratio() or 1)})",
        confidence=confidence, severity="critical" if big else "warning",
        summary=(f"At the same load as its peers ({', '.join(v.peers)}), {v.replica} is slower: "
                 f"{what}. {load}{tail_txt}{engine_txt}{cause_txt}"),
        evidence=ev,
        next_actions=[f"Take {v.replica} out of rotation (or lower its weight) while it is looked at.",
                      *( [cause_action(cause.verdict)] if cause and cause.verdict else []),
                      f"Compare its engine configuration with a peer's: `infbench config diff` "
                      f"of captures from {v.replica} and {v.peers[0] if v.peers else 'a peer'}."])


_CAUSE_ACTIONS = {
    "gpu_thermal_throttle": "Check the GPU's cooling: `nvidia-smi -q -d TEMPERATURE,PERFORMANCE` on its "
                            "host (fans, airflow, inlet temperature, a failed fan or heatsink).",
    "gpu_power_throttle": "Check its power limit and supply: `nvidia-smi -q -d POWER,PERFORMANCE` "
                          "(a lowered limit, PSU or board power brake).",
    "gpu_clocks_throttled": "Check clocks and clock-event reasons: `nvidia-smi -q -d CLOCK,PERFORMANCE` "
                            "(application clocks or a clock lock set on this GPU only).",
    "gpu_power_capped": "Compare `nvidia-smi -q -d POWER` with a peer's: the enforced power limit, "
                        "and restore the fleet's (`nvidia-smi -pl`).",
    "gpu_running_hot": "Check cooling on its host: the GPU runs much hotter than its peers'.",
    "pcie_link_degraded": "Reseat or move the card / check the riser and BIOS: `nvidia-smi -q -d PCIE` "
                          "and `lspci -vv` (LnkSta vs LnkCap) show the trained link.",
    "gpu_xid_error": "Read the XID in the host's kernel log (`dmesg | grep -i xid`) and follow "
                     "NVIDIA's XID catalogue; drain the node if it recurs.",
    "gpu_ecc_errors": "Check `nvidia-smi -q -d ECC,ROW_REMAPPER`; uncorrectable errors or pending "
                      "remaps need a GPU reset or RMA.",
}


def cause_action(verdict: str) -> str:
    return _CAUSE_ACTIONS[verdict]


def _hardware(v: ReplicaVerdict, walk: Walk, slower: Finding) -> Finding:
    """The cause is only as sure, and as severe, as the slowdown it explains: it comes after it."""
    if not walk.has_telemetry:
        return Finding(
            verdict="replica_gpu_telemetry_missing", title=f"No GPU telemetry for {v.replica}",
            confidence=0.5, severity="info",
            summary=(f"The run recorded no GPU samples for {v.replica}, so the hardware walk "
                     "(clocks, power, PCIe, errors) could not be done from the store."),
            evidence=[], next_actions=[
                "Run the fleet again with each replica's dcgm-exporter in the targets file "
                "(`[NAME=]URL dcgm=http://HOST:9400/metrics`), or `infbench probe gpu` on its host.",
                "On its host now: `nvidia-smi -q -d CLOCK,PERFORMANCE,POWER,TEMPERATURE,PCIE,ECC`."])
    ev = [c.evidence for c in walk.checks]
    cause = walk.cause
    if cause is None:
        return Finding(
            verdict="replica_cause_not_in_gpu_telemetry",
            title=f"{v.replica}'s GPU telemetry matches its peers'", confidence=0.5, severity="info",
            summary=(f"Clocks, power and temperature, the PCIe link and error counters of "
                     f"{v.replica} are at its peers' level, so the slowdown is not a throttled or "
                     "degraded GPU as telemetry shows it."),
            evidence=ev, next_actions=[
                "Look outside the GPU: a busy or throttled host CPU, a noisy neighbour, NUMA "
                "placement, a different engine version or setting (`infbench config diff`).",
                f"`infbench diagnose stalls RUN` restricted to {v.replica}'s requests shows host pauses."])
    others = [c.title for c in walk.checks if c.abnormal and c is not cause and c.title]
    order = " -> ".join(f"{c.name}: {'ABNORMAL' if c.abnormal else 'ok'}" for c in walk.checks)
    return Finding(
        verdict=cause.verdict or "replica_hardware", title=f"{v.replica}: {cause.title}",
        confidence=round(0.95 * slower.confidence, 3), severity=slower.severity,
        summary=(f"The hardware walk over {v.replica}'s GPU telemetry against its peers' "
                 f"({', '.join(v.peers)}) stops at {cause.name}: {cause.detail}."
                 + (f" Also abnormal: {'; '.join(others)}." if others else "")
                 + f" Walk: {order}."),
        evidence=ev, next_actions=[cause_action(cause.verdict)] if cause.verdict else [])


def _busier(v: ReplicaVerdict, z: float, obs: Observations, options: ReplicaOptions) -> Finding:
    parts = []
    if v.request_ratio is not None:
        parts.append(f"was sent {v.request_ratio:.2f}x its peers' requests")
    if v.load_ratio is not None:
        parts.append(f"its requests met {v.load_ratio:.2f}x their load (in flight at send)")
    same = ", ".join(f"{METRIC_WORDS[m]} {c.describe(z)}" for m, c in v.comparisons.items() if c.delta is not None)
    if not same:  # busier for sure; slower or not, too few requests at shared loads to say
        return Finding(
            verdict="replica_busier", title=f"Replica {v.replica} is busier (not compared at equal load)",
            confidence=0.5, severity="warning",
            summary=(f"{v.replica} {' and '.join(parts)}. Too few of its requests ran at loads its "
                     "peers also saw to tell whether it is also slower."),
            evidence=_cmp_evidence(v, z, obs),
            next_actions=["Record a longer fleet run (more requests at each load) and diagnose again.",
                          "Check the load balancer's weights and policy."])
    raw = v.comparisons.get("tpot") or next(iter(v.comparisons.values()))
    raw_txt = ""
    if raw.raw_ratio is not None:
        raw_txt = (f" Unmatched, its median {METRIC_WORDS[raw.metric]} is {raw.raw_ratio:.2f}x theirs"
                   + (": that is the load." if raw.raw_ratio >= 1 + options.min_effect / 2 else "."))
    if v.refuted_on:
        matched = refutation(v, z)
    else:
        matched = (f"At matched load it is as fast as its peers ({same}; none "
                   f"{options.min_effect:.0%} or more slower).")
    return Finding(
        verdict="replica_busier",
        title=f"Replica {v.replica} is busier, not slower",
        confidence=0.8, severity="warning",
        summary=f"{v.replica} {' and '.join(parts)}. {matched}{raw_txt}",
        evidence=_cmp_evidence(v, z, obs) + (engine_evidence(v, obs) if v.refuted_by == "engine_time" else []),
        next_actions=["Check the load balancer's weights and policy (least-outstanding routing "
                      "evens out load that round robin does not when requests differ in length).",
                      "No hardware check is needed for this replica: its latency curve is its peers'."])


def _failing(e: ReplicaErrors, sql: str, walk: Walk) -> Finding:
    cause = walk.cause
    return Finding(
        verdict="replica_failing", title=f"Replica {e.replica} fails {e.share:.0%} of its requests",
        confidence=0.9, severity="critical",
        summary=(f"{e.failed} of {e.requests} requests sent to {e.replica} failed (mostly "
                 f"{e.top_error}; the first {e.first_failure_s:.1f} s into the run), against "
                 f"{e.peers_share:.1%} on its peers."
                 + (f" Telemetry: {cause.detail}." if cause else "")),
        evidence=[Evidence("replica_errors", {"replica": e.replica, "requests": e.requests,
                                              "failed": e.failed, "top_error": e.top_error,
                                              "first_failure_s": round(e.first_failure_s or 0.0, 3),
                                              "peers_failed_share": round(e.peers_share, 4)},
                           sql, "failed requests per replica (cancelled ones, cut by the run's end, left out)"),
                  *[c.evidence for c in walk.checks]],
        next_actions=[f"Take {e.replica} out of rotation; its engine log around the first failure "
                      "says why.", *([cause_action(cause.verdict)] if cause and cause.verdict else [])])


def _unknown_replica(config: dict, options: ReplicaOptions, sql: str, row: tuple) -> Finding:
    steps = measurement_plan(config, options.db, options.replica_urls)
    return Finding(
        verdict="replicas_unknown",
        title="Which replica served each request is unknown: measure them one by one",
        confidence=1.0, severity="info",
        summary=("This run went through one URL, so requests cannot be attributed to replicas "
                 "(a load balancer picked them). Send the same workload to each replica "
                 "directly, at the load each met behind the balancer, and compare at matched load."),
        evidence=[Evidence("replica_attribution", {"requests_with_replica": row[0] if row else 0,
                                                    "requests": row[1] if row else 0},
                           sql, "requests.replica is NULL for every request: a one-URL run")],
        next_actions=steps)
