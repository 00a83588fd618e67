"""One rule, two runs: the estimate of each, the interval of the change, and a verdict.

Every change is candidate against baseline (a ratio minus one for a relative tolerance, a
difference otherwise), signed the same way in every output; the rule's limit is signed in
the same space (+5% when lower is better, -5% when higher is better). The rule passes when
the whole interval is on the good side of the limit, fails when the whole interval is beyond
it, and is inconclusive when the interval straddles it (the runs cannot tell) or a run lacks
the data the statistic needs.

Paired runs (same requests, see `compat`) are resampled together: one resample of request
pairs drives both runs' statistics. Unpaired runs are resampled independently. Either way the
replicates are then spread by the rule's `run_noise` (run-to-run drift no single run shows).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from statistics import NormalDist
from typing import Any

import numpy as np

from infbench.gate.compat import Pairing
from infbench.gate.rank import overlapping_shift
from infbench.gate.rules import METRICS, GateSettings, Rule, format_change
from infbench.gate.samples import RunSamples
from infbench.gate.sides import (
    NotEnoughData,
    goodput_slo,
    need,
    paired_sides,
    quantile_support,
    run_side,
)
from infbench.gate.stats import (
    block_replicates,
    overlap_factor,
    percentile_interval,
    point_estimate,
    replicates,
    widen,
)

PASS, FAIL, INCONCLUSIVE = "pass", "fail", "inconclusive"


@dataclass
class RuleResult:
    rule: str
    metric: str
    statistic: str
    unit: str
    direction: str
    tolerance: str  # the limit on the change, e.g. "<= +5.0%"
    method: str
    baseline: float | None
    candidate: float | None
    change: float | None  # candidate vs baseline: relative (fraction) or absolute, signed
    ci: tuple[float, float] | None  # interval of `change`, same sign
    relative: bool
    verdict: str
    reason: str
    n_baseline: int
    n_candidate: int
    limit: float = 0.0  # the worst acceptable change, signed like `change`
    paired: bool = False  # requests compared pair by pair
    estimator: str = ""  # what the change and its interval are, in words
    p_value: float | None = None
    run_spread: float | None = None  # several runs per side: their relative sd per run, measured

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Estimate:
    value: float
    replicates: np.ndarray
    n: int


def estimate(rule: Rule, s: RunSamples, settings: GateSettings, rng: np.random.Generator,
             slo: dict[str, float] | None = None) -> Estimate:
    """One run's statistic with its own bootstrap replicates, widened by the overlap of its
    requests (engine steps: a block bootstrap of the step series)."""
    if METRICS[rule.metric].family == "step":
        need(s.step_ms.size > 0, "no engine step log (the target has no /engine/steps)")
        quantile_support(s.step_ms.size, rule.quantile, "decode steps", settings)
        return Estimate(point_estimate(s.step_ms, rule.quantile),
                        block_replicates(s.step_ms, rule.quantile, settings.replicates, rng), s.step_ms.size)
    side = run_side(rule, s, settings, slo)
    reps = side.stat.alone(settings.replicates, rng)
    reps = widen(reps, overlap_factor(side.stat.influence(), side.start, side.end), log=True)
    if side.stat.unpaired_log_var > 0:
        reps = reps * np.exp(rng.normal(0.0, math.sqrt(side.stat.unpaired_log_var), reps.size))
    return Estimate(side.stat.value(), reps, side.stat.n)


def run_value(rule: Rule, s: RunSamples, settings: GateSettings) -> float:
    """One run's statistic alone (no resampling): what a table of runs shows."""
    if METRICS[rule.metric].family == "step":
        return point_estimate(s.step_ms, rule.quantile)
    slo = goodput_slo(rule, s, s) if rule.statistic == "goodput" else None
    return run_side(rule, s, settings, slo).stat.value()


def run_noise(rule: Rule, settings: GateSettings) -> float:
    return settings.run_noise if rule.run_noise is None else rule.run_noise


@dataclass(frozen=True)
class Change:
    base: float
    cand: float
    n_base: int
    n_cand: int
    replicates: np.ndarray  # of log(cand / base) when relative, else cand - base; no run noise


def change_replicates(rule: Rule, base: RunSamples, cand: RunSamples, pairing: Pairing | None,
                      settings: GateSettings, rng: np.random.Generator,
                      slo: dict[str, float] | None) -> Change:
    """The sampling distribution of the change. Paired: both statistics from the same
    resamples of request pairs, the spread widened by how much the pairs' influence on the
    change overlaps in time (in either run). Unpaired: each run resampled on its own."""
    family = METRICS[rule.metric].family
    if pairing is None or family == "step":
        eb, ec = estimate(rule, base, settings, rng, slo), estimate(rule, cand, settings, rng, slo)
        rb, rc, nb, nc, vb, vc = eb.replicates, ec.replicates, eb.n, ec.n, eb.value, ec.value
        factor = 1.0
    else:
        b, c = paired_sides(rule, base, cand, pairing, settings, slo)
        rb, rc = replicates([b.stat, c.stat], settings.replicates, rng)
        infl = c.stat.influence() - b.stat.influence()
        factor = max(overlap_factor(infl, b.start, b.end), overlap_factor(infl, c.start, c.end))
        nb = nc = b.stat.n
        vb, vc = b.stat.value(), c.stat.value()
    if rule.relative:
        need(vb > 0 and float(np.min(rb)) > 0,
              "baseline is zero: a relative change is undefined (use an absolute tolerance)")
        reps = widen(np.log(np.maximum(rc, 1e-300) / rb), factor, log=False)
    else:
        reps = widen(rc - rb, factor, log=False)
    return Change(vb, vc, nb, nc, reps)


def judge(ci: tuple[float, float], rule: Rule,
          remedy: str = "more requests (or less run noise)") -> tuple[str, str]:
    """The verdict of an interval of the change against the rule's limit, with its reason."""
    unit = METRICS[rule.metric].unit

    def fmt(v: float) -> str:
        return format_change(v, rule.relative, unit)

    span = f"the change is {fmt(ci[0])} .. {fmt(ci[1])}"
    limit = fmt(rule.limit)
    lower = rule.direction == "lower"
    worst, best = (ci[1], ci[0]) if lower else (ci[0], ci[1])
    within = worst <= rule.limit if lower else worst >= rule.limit
    beyond = best > rule.limit if lower else best < rule.limit
    if within:
        better = worst < 0 if lower else worst > 0
        return PASS, f"{span}: an improvement throughout" if better else f"{span}, within the limit {limit}"
    if beyond:
        worse = "slower" if lower else "lower"
        return FAIL, f"{span}, all of it beyond the limit {limit} ({worse})"
    return INCONCLUSIVE, f"{span}, straddling the limit {limit}: {remedy} are needed to tell"


def _new_result(rule: Rule, base: RunSamples, cand: RunSamples, paired: bool) -> RuleResult:
    return RuleResult(rule.label, rule.metric, rule.statistic, METRICS[rule.metric].unit, rule.direction,
                      rule.limit_text, rule.method, None, None, None, None, rule.relative, INCONCLUSIVE, "",
                      base.n_requests, cand.n_requests, rule.limit, paired)


def _describe(rule: Rule, paired: bool) -> str:
    family = METRICS[rule.metric].family
    what = "ratio" if rule.relative else "difference"
    if family == "step":
        return f"{what} of the runs' step {rule.statistic}, block bootstrap of each run's steps"
    stat = "steady rate (without the run's fill and drain)" if family == "rate" else rule.statistic
    how = "bootstrap of request pairs" if paired else "bootstrap of each run's requests"
    return f"{what} of the runs' {stat}, {how}, widened for requests in flight together"


def evaluate_rule(rule: Rule, base: RunSamples, cand: RunSamples, settings: GateSettings,
                  rng: np.random.Generator, pairing: Pairing | None = None) -> RuleResult:
    paired = pairing is not None and METRICS[rule.metric].family != "step"
    result = _new_result(rule, base, cand, paired)
    try:
        if _uses_shift(rule, paired):
            return _evaluate_shift(rule, base, cand, settings, pairing if paired else None, result)
        slo = goodput_slo(rule, base, cand) if rule.statistic == "goodput" else None
        ch = change_replicates(rule, base, cand, pairing if paired else None, settings, rng, slo)
    except NotEnoughData as exc:
        result.reason = str(exc)
        return result
    result.baseline, result.candidate = ch.base, ch.cand
    result.n_baseline, result.n_candidate = ch.n_base, ch.n_cand
    result.estimator = _describe(rule, paired)
    # Drift between runs: each run's statistic moves by a lognormal factor of sd run_noise.
    s = math.log1p(run_noise(rule, settings))
    nb, nc = rng.normal(0.0, s, ch.replicates.size), rng.normal(0.0, s, ch.replicates.size)
    if rule.relative:
        result.change = ch.cand / ch.base - 1.0
        reps = np.expm1(ch.replicates + nc - nb)
    else:
        result.change = ch.cand - ch.base
        reps = ch.replicates + ch.cand * np.expm1(nc) - ch.base * np.expm1(nb)
    result.ci = percentile_interval(reps, settings.confidence)
    result.verdict, result.reason = judge(result.ci, rule)
    return result


def _uses_shift(rule: Rule, paired: bool) -> bool:
    """Rank rules, and median rules of paired per-request metrics, compare the typical
    request: the location shift of per-request values (paired: of per-request changes, where
    the workload's own spread cancels request by request). Tail quantiles and means compare
    the runs' statistics."""
    return rule.method == "rank" or (paired and METRICS[rule.metric].family == "request"
                                     and rule.quantile == 0.5)


# A relative change needs positive values; a request can measure 0 where the client's reads
# coarsen the clock (every token after the first in one read: TPOT 0), and such a request
# says nothing about the change. Up to this share of the requests (in either run) is left
# out and said so; more means the metric was mostly not measured, and the rule cannot tell.
MAX_NOT_POSITIVE = 0.05


def _positive_rows(x: np.ndarray, y: np.ndarray, rb: np.ndarray, rc: np.ndarray, paired: bool,
                   metric: str) -> tuple[np.ndarray, np.ndarray, str]:
    bad_b, bad_c = int((x[rb] <= 0).sum()), int((y[rc] <= 0).sum())
    if not bad_b and not bad_c:
        return rb, rc, ""
    worst = max(bad_b / max(rb.size, 1), bad_c / max(rc.size, 1))
    counts = f"{bad_b} of {rb.size} baseline and {bad_c} of {rc.size} candidate requests"
    if worst > MAX_NOT_POSITIVE:
        raise NotEnoughData(f"a relative change of the typical request needs positive values: {counts} "
                            f"had {metric} <= 0 (more than {MAX_NOT_POSITIVE:.0%} of a run)")
    if paired:
        ok = (x[rb] > 0) & (y[rc] > 0)
        rb, rc = rb[ok], rc[ok]
    else:
        rb, rc = rb[x[rb] > 0], rc[y[rc] > 0]
    return rb, rc, f"; {counts} with {metric} <= 0 left out (a ratio needs positive values)"


def _evaluate_shift(rule: Rule, base: RunSamples, cand: RunSamples, settings: GateSettings,
                    pairing: Pairing | None, result: RuleResult) -> RuleResult:
    x, y = base.per_request[rule.metric], cand.per_request[rule.metric]
    if pairing is not None:
        ok = np.isfinite(x[pairing.base_rows]) & np.isfinite(y[pairing.cand_rows])
        rb, rc = pairing.base_rows[ok], pairing.cand_rows[ok]
    else:
        rb, rc = np.flatnonzero(np.isfinite(x)), np.flatnonzero(np.isfinite(y))
    left_out = ""
    if rule.relative:
        rb, rc, left_out = _positive_rows(x, y, rb, rc, pairing is not None, rule.metric)
    x, y = x[rb], y[rc]
    what = "paired requests" if pairing is not None else "requests"
    quantile_support(x.size, 0.5, what, settings)
    quantile_support(y.size, 0.5, what, settings)
    result.baseline, result.candidate = float(np.median(x)), float(np.median(y))
    result.n_baseline, result.n_candidate = x.size, y.size
    a, b = (np.log(x), np.log(y)) if rule.relative else (x, y)
    r = overlapping_shift(a, b, settings.confidence, paired=pairing is not None,
                          base_times=(base.send_s[rb], base.done_s[rb]),
                          cand_times=(cand.send_s[rc], cand.done_s[rc]))
    # Run noise: each run's location moves by a factor of sd run_noise (log scale), or that
    # share of the baseline median on an absolute scale; added in quadrature to each side.
    s = math.log1p(run_noise(rule, settings))
    s = s if rule.relative else run_noise(rule, settings) * result.baseline
    z = NormalDist().inv_cdf(1.0 - (1.0 - settings.confidence) / 2.0)
    extra = 2.0 * (z * s) ** 2
    lo = r.shift - math.sqrt((r.shift - r.ci[0]) ** 2 + extra)
    hi = r.shift + math.sqrt((r.ci[1] - r.shift) ** 2 + extra)
    if rule.relative:
        result.change, result.ci = math.expm1(r.shift), (math.expm1(lo), math.expm1(hi))
    else:
        result.change, result.ci = r.shift, (lo, hi)
    result.p_value = r.p_value
    result.estimator = ("typical per-request change (Hodges-Lehmann of the pairs, signed-rank interval)"
                        if pairing is not None else
                        "location shift (Hodges-Lehmann, Mann-Whitney interval)") + \
        ", widened for requests in flight together" + left_out
    result.verdict, result.reason = judge(result.ci, rule)
    return result


def overall(results: list[RuleResult]) -> str:
    verdicts = {r.verdict for r in results}
    if FAIL in verdicts:
        return FAIL
    return INCONCLUSIVE if INCONCLUSIVE in verdicts else PASS
