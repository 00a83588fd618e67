"""One rule, two runs: the estimate of each, the interval of the change, and a verdict.

The verdict reads the interval against the tolerance, oriented so that "regression" is
positive: pass when even the worst end of the interval is within tolerance, fail when even
the best end is beyond it, inconclusive when the interval straddles the tolerance (the runs
cannot tell) or a run lacks the data the statistic needs.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from infbench.gate.rules import METRICS, GateSettings, Rule
from infbench.gate.samples import RunSamples
from infbench.gate.stats import (
    block_replicates,
    clustered_replicates,
    mean_replicates,
    percentile_interval,
    point_estimate,
    quantile_replicates,
    rank_shift,
    rate_replicates,
)

PASS, FAIL, INCONCLUSIVE = "pass", "fail", "inconclusive"
MIN_WINDOWS = 5  # batch means need a few windows before their t-interval means anything
MAX_WINDOWS = 30
MIN_TAIL = 10  # samples beyond a quantile needed to estimate it at all


@dataclass
class RuleResult:
    rule: str
    metric: str
    statistic: str
    unit: str
    direction: str
    tolerance: str
    method: str
    baseline: float | None
    candidate: float | None
    change: float | None  # relative (fraction) or absolute, candidate vs baseline, signed
    ci: tuple[float, float] | None
    relative: bool
    verdict: str
    reason: str
    n_baseline: int
    n_candidate: int
    p_value: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class NotEnoughData(Exception):
    """A run cannot support the statistic; the message says what is missing."""


@dataclass(frozen=True)
class Estimate:
    value: float
    replicates: np.ndarray
    n: int


def _need(ok: bool, message: str) -> None:
    if not ok:
        raise NotEnoughData(message)


def _quantile_support(n: int, q: float | None, what: str, settings: GateSettings) -> None:
    _need(n >= settings.min_requests, f"{n} {what}, fewer than min_requests = {settings.min_requests}")
    if q is not None:
        tail = n * min(q, 1.0 - q)
        need = math.ceil(MIN_TAIL / min(q, 1.0 - q))
        _need(tail >= MIN_TAIL, f"p{q * 100:g} needs at least {need} {what}, has {n}")


def rate_windows(s: RunSamples, weights: np.ndarray) -> np.ndarray:
    """Per-window rates over the steady part of a run: from the first completion to the last
    send (before it the pipeline fills, after it the load drains away)."""
    _need(s.n_requests > 0, "no completed requests")
    start, stop = float(s.done_s.min()), float(s.send_s.max())
    e2e = float(np.nanmedian(s.per_request["e2el"])) / 1e3
    width = max(2.0 * e2e, 0.05)
    k = min(MAX_WINDOWS, int((stop - start) / width))
    _need(k >= MIN_WINDOWS, f"steady part is {max(stop - start, 0):.2f}s; a rate needs {MIN_WINDOWS} "
                            f"windows of 2 x median e2e ({width:.2f}s each)")
    edges = np.linspace(start, stop, k + 1)
    inside = (s.done_s >= start) & (s.done_s < stop)
    per = np.bincount(np.clip(np.searchsorted(edges, s.done_s[inside], side="right") - 1, 0, k - 1),
                      weights=weights[inside], minlength=k)
    return per / (edges[1] - edges[0])


def _good(s: RunSamples, slo: dict[str, float]) -> np.ndarray:
    ok = np.ones(s.n_requests, dtype=bool)
    if "ttft" in slo:
        ok &= s.per_request["ttft_intended"] <= slo["ttft"]
    if "tpot" in slo:
        ok &= np.nan_to_num(s.per_request["tpot"], nan=0.0) <= slo["tpot"]
    if "e2el" in slo:
        ok &= s.per_request["e2el_intended"] <= slo["e2el"]
    return ok.astype(float)


def goodput_slo(rule: Rule, base: RunSamples, cand: RunSamples) -> dict[str, float]:
    if rule.slo_ms:
        return rule.slo_ms
    b, c = base.slo_ms, cand.slo_ms
    _need(bool(b) and b == c, "goodput needs an slo in the rule (the runs recorded "
                              f"{b or 'none'} and {c or 'none'})")
    return b


def estimate(rule: Rule, s: RunSamples, settings: GateSettings, rng: np.random.Generator,
             slo: dict[str, float] | None = None) -> Estimate:
    family = METRICS[rule.metric].family
    q = rule.quantile
    b = settings.replicates
    if family == "request":
        x = s.finite(rule.metric)
        _quantile_support(x.size, q, "requests", settings)
        reps = mean_replicates(x, b, rng) if q is None else quantile_replicates(x, q, b, rng)
        return Estimate(point_estimate(x, q), reps, x.size)
    if family == "itl":
        _quantile_support(s.n_requests, None, "requests", settings)
        _quantile_support(s.itl.values.size, q, "gaps", settings)
        reps = clustered_replicates(s.itl, q, b, rng)
        return Estimate(point_estimate(s.itl.values, q), reps, s.n_requests)
    if family == "step":
        _need(s.step_ms.size > 0, "no engine step log (the target has no /engine/steps)")
        _quantile_support(s.step_ms.size, q, "decode steps", settings)
        return Estimate(point_estimate(s.step_ms, q), block_replicates(s.step_ms, q, b, rng),
                        s.step_ms.size)
    # rates
    _quantile_support(s.n_requests, None, "requests", settings)
    if rule.statistic == "goodput":
        weights = _good(s, slo or {})
    elif rule.metric == "requests":
        weights = np.ones(s.n_requests)
    elif rule.metric == "output_tokens":
        weights = s.output_tokens
    else:
        weights = s.output_tokens + s.prompt_tokens
    windows = rate_windows(s, weights)
    return Estimate(float(windows.mean()), rate_replicates(windows, b, rng), s.n_requests)


def with_run_noise(e: Estimate, noise: float, rng: np.random.Generator) -> Estimate:
    """Spread the replicates by the machine's run-to-run drift (a lognormal factor)."""
    if noise <= 0:
        return e
    factor = np.exp(rng.normal(0.0, math.log1p(noise), size=e.replicates.size))
    return Estimate(e.value, e.replicates * factor, e.n)


def _verdict(ci: tuple[float, float], rule: Rule) -> tuple[str, str]:
    # Orient so that a positive number is a regression, whichever way is better.
    lo, hi = ci if rule.direction == "lower" else (-ci[1], -ci[0])
    tol = rule.max_regression
    fmt = (lambda v: f"{v:+.1%}") if rule.relative else (lambda v: f"{v:+.3g}")
    worse = "slower" if rule.direction == "lower" else "lower"
    if hi <= tol:
        if hi < 0:
            return PASS, f"improved: even the worst case {fmt(hi)} regression is an improvement"
        return PASS, f"regression at most {fmt(hi)}, within {rule.tolerance_text}"
    if lo > tol:
        return FAIL, f"regression at least {fmt(lo)} ({worse}), beyond {rule.tolerance_text}"
    return INCONCLUSIVE, (f"the interval of the regression ({fmt(lo)} .. {fmt(hi)}) straddles "
                          f"{rule.tolerance_text}: more requests are needed to tell")


def evaluate_rule(rule: Rule, base: RunSamples, cand: RunSamples, settings: GateSettings,
                  rng: np.random.Generator) -> RuleResult:
    kind = METRICS[rule.metric]
    result = RuleResult(rule.label, rule.metric, rule.statistic, kind.unit, rule.direction,
                        rule.tolerance_text, rule.method, None, None, None, None, rule.relative,
                        INCONCLUSIVE, "", base.n_requests, cand.n_requests)
    try:
        if rule.method == "rank":
            return _evaluate_rank(rule, base, cand, settings, result)
        slo = goodput_slo(rule, base, cand) if rule.statistic == "goodput" else None
        eb = estimate(rule, base, settings, rng, slo)
        ec = estimate(rule, cand, settings, rng, slo)
    except NotEnoughData as exc:
        result.reason = str(exc)
        return result
    result.baseline, result.candidate = eb.value, ec.value
    result.n_baseline, result.n_candidate = eb.n, ec.n
    noise = settings.run_noise if rule.run_noise is None else rule.run_noise
    eb, ec = with_run_noise(eb, noise, rng), with_run_noise(ec, noise, rng)
    if rule.relative:
        _need_positive = eb.value > 0 and float(np.min(eb.replicates)) > 0
        if not _need_positive:
            result.reason = "baseline is zero: a relative change is undefined (use an absolute tolerance)"
            return result
        result.change = ec.value / eb.value - 1.0
        reps = ec.replicates / eb.replicates - 1.0
    else:
        result.change = ec.value - eb.value
        reps = ec.replicates - eb.replicates
    result.ci = percentile_interval(reps, settings.confidence)
    result.verdict, result.reason = _verdict(result.ci, rule)
    return result


def _evaluate_rank(rule: Rule, base: RunSamples, cand: RunSamples, settings: GateSettings,
                   result: RuleResult) -> RuleResult:
    x, y = base.finite(rule.metric), cand.finite(rule.metric)
    _quantile_support(x.size, 0.5, "requests", settings)
    _quantile_support(y.size, 0.5, "requests", settings)
    result.baseline, result.candidate = float(np.median(x)), float(np.median(y))
    result.n_baseline, result.n_candidate = x.size, y.size
    if rule.relative:
        if x.min() <= 0 or y.min() <= 0:
            raise NotEnoughData("rank with a relative tolerance needs positive values")
        r = rank_shift(np.log(x), np.log(y), settings.confidence)
        result.change = math.expm1(r.shift)
        result.ci = (math.expm1(r.ci[0]), math.expm1(r.ci[1]))
    else:
        r = rank_shift(x, y, settings.confidence)
        result.change, result.ci = r.shift, r.ci
    result.p_value = r.p_value
    result.verdict, result.reason = _verdict(result.ci, rule)
    return result


def overall(results: list[RuleResult]) -> str:
    verdicts = {r.verdict for r in results}
    if FAIL in verdicts:
        return FAIL
    return INCONCLUSIVE if INCONCLUSIVE in verdicts else PASS
