"""Several runs per side: the run is the unit, and the runs measure their own drift.

One run per side gives an interval that knows the sampling error inside each run, not how far
the same build moves from one run to the next on a shared host (another tenant, CPU frequency,
where the scheduler put the engine's threads). On a 2-vCPU host beside a busy neighbour, six
identical runs of a real vLLM spread from 400 to 529 output tok/s; a one-run gate calls the
slowest against the fastest a 24% regression. Given k baseline runs and n candidate runs of one
workload (k + n >= 3), each rule is judged on the runs' statistics themselves:

    x_i = log(statistic of baseline run i)   (the statistic itself for an absolute tolerance)
    y_j = log(statistic of candidate run j)
    change = mean(y) - mean(x)               (a ratio of geometric means when relative)
    s^2 = pooled variance of x and y about their side's mean, on k + n - 2 degrees of freedom
    interval = change +/- t(k + n - 2) * sqrt(max(s^2, w^2) * (1/k + 1/n))

where w^2 is the sampling variance of one run's statistic (`sampling_floor`): runs cannot
agree more closely than their own requests allow, however close three runs happen to fall.
Student's t on the runs' own spread replaces the rules' `run_noise`, which is a guess made
elsewhere; with two or three runs the interval is wide, which is the honest answer on a noisy
host. The verdict then follows the same limits as every other gate.
"""

from __future__ import annotations

import math

import numpy as np

from infbench.gate.compat import compare_runs, pair_requests
from infbench.gate.evaluate import (
    INCONCLUSIVE,
    RuleResult,
    change_replicates,
    estimate,
    judge,
    run_value,
)
from infbench.gate.rules import METRICS, GateSettings, Rule
from infbench.gate.samples import RunSamples
from infbench.gate.sides import NotEnoughData, goodput_slo, need, run_side

MIN_RUNS = 3  # in all: with fewer, no degree of freedom is left for the runs' spread


def t_central(t: float, df: int) -> float:
    """P(|T| < t) for Student's t on integer df >= 1: a closed form in theta = atan(t / sqrt(df))
    (odd df: 2/pi (theta + sin cos sum); even df: sin theta sum), exact, no SciPy needed."""
    theta = math.atan(abs(t) / math.sqrt(df))
    c2 = math.cos(theta) ** 2
    term = total = 1.0
    if df % 2 == 1:
        for k in range(1, (df - 1) // 2):
            term *= c2 * (2 * k) / (2 * k + 1)
            total += term
        tail = math.sin(theta) * math.cos(theta) * total if df > 1 else 0.0
        return 2.0 / math.pi * (theta + tail)
    for k in range(1, df // 2):
        term *= c2 * (2 * k - 1) / (2 * k)
        total += term
    return math.sin(theta) * total


def t_quantile(p: float, df: int) -> float:
    """Student's t quantile for integer df >= 1, by bisection of `t_central`."""
    if df < 1:
        raise ValueError(f"df: must be >= 1, got {df}")
    central = abs(2.0 * p - 1.0)
    lo, hi = 0.0, 1.0
    while t_central(hi, df) < central:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if t_central(mid, df) < central else (lo, mid)
    t = (lo + hi) / 2.0
    return t if p >= 0.5 else -t


def _values(rule: Rule, runs: list[RunSamples], settings: GateSettings,
            slo: dict[str, float] | None) -> np.ndarray:
    """Each run's statistic, on the rule's scale (its log when the tolerance is relative)."""
    out = []
    for s in runs:
        if METRICS[rule.metric].family == "step":
            need(s.step_ms.size > 0, f"run {s.run.run_id}: no engine step log (the target has no /engine/steps)")
        v = run_value(rule, s, settings) if slo is None else run_side(rule, s, settings, slo).stat.value()
        if rule.relative:
            need(v > 0, f"run {s.run.run_id}: the statistic is zero, so a relative change is undefined")
            v = math.log(v)
        need(math.isfinite(v), f"run {s.run.run_id}: no value of {rule.label}")
        out.append(v)
    return np.array(out)


def sampling_floor(rule: Rule, runs: list[RunSamples], settings: GateSettings,
                   rng: np.random.Generator, slo: dict[str, float] | None) -> float:
    """The variance of one run's statistic that its own requests explain. Runs that sent the
    same requests share the workload's length mix, so only what differs between two runs of
    those requests counts: half the variance of a paired change, over consecutive runs. Runs
    that sent different requests each carry their own mix: each run's bootstrap."""
    paired = all(compare_runs(runs[0], s).same_requests for s in runs[1:])
    parts = []
    for a, b in zip(runs, runs[1:], strict=False) if paired else ((s, None) for s in runs):
        if b is not None:
            pairing, why = pair_requests(a, b, settings.min_requests)
            if pairing is not None:
                reps = change_replicates(rule, a, b, pairing, settings, rng, slo).replicates
                parts.append(float(np.var(reps[np.isfinite(reps)])) / 2.0)
                continue
        for one in (a,) if b is None else (a, b):
            e = estimate(rule, one, settings, rng, slo)
            reps = e.replicates[np.isfinite(e.replicates) & (e.replicates > 0 if rule.relative else True)]
            parts.append(float(np.var(np.log(reps) if rule.relative else reps)))
    return float(np.mean(parts))


def evaluate_replicated(rule: Rule, bases: list[RunSamples], cands: list[RunSamples],
                        settings: GateSettings, rng: np.random.Generator) -> RuleResult:
    """One rule over k baseline and n candidate runs (k + n >= 3): see the module doc."""
    k, n = len(bases), len(cands)
    if k < 1 or n < 1 or k + n < MIN_RUNS:
        raise ValueError(f"runs: {k} baseline and {n} candidate given; a gate on the runs' own spread "
                         f"needs at least one per side and {MIN_RUNS} in all")
    kind = METRICS[rule.metric]
    result = RuleResult(rule.label, rule.metric, rule.statistic, kind.unit, rule.direction,
                        rule.limit_text, rule.method, None, None, None, None, rule.relative,
                        INCONCLUSIVE, "", sum(s.n_requests for s in bases),
                        sum(s.n_requests for s in cands), rule.limit, False)
    try:
        slo = goodput_slo(rule, bases[0], cands[0]) if rule.statistic == "goodput" else None
        for s in (*bases, *cands):
            if slo is not None and not rule.slo_ms:
                goodput_slo(rule, bases[0], s)  # every run must have recorded the same SLO
        xb, xc = _values(rule, bases, settings, slo), _values(rule, cands, settings, slo)
        sampling2 = sampling_floor(rule, [*bases, *cands], settings, rng, slo)
    except NotEnoughData as exc:
        result.reason = str(exc)
        return result
    df = k + n - 2
    spread2 = float((np.sum((xb - xb.mean()) ** 2) + np.sum((xc - xc.mean()) ** 2)) / df)
    se = math.sqrt(max(spread2, sampling2) * (1.0 / k + 1.0 / n))
    t = t_quantile(1.0 - (1.0 - settings.confidence) / 2.0, df)
    d = float(xc.mean() - xb.mean())
    lo, hi = d - t * se, d + t * se
    if rule.relative:
        result.baseline, result.candidate = float(np.exp(xb.mean())), float(np.exp(xc.mean()))
        result.change, result.ci = math.expm1(d), (math.expm1(lo), math.expm1(hi))
        result.run_spread = math.expm1(math.sqrt(spread2))
    else:
        result.baseline, result.candidate = float(xb.mean()), float(xc.mean())
        result.change, result.ci = d, (lo, hi)
        base = abs(result.baseline)
        result.run_spread = math.sqrt(spread2) / base if base else None
    result.p_value = 1.0 - t_central(d / se, df) if se > 0 else None
    mean = "geometric mean" if rule.relative else "mean"
    floor = " (floored at one run's sampling error)" if sampling2 > spread2 else ""
    result.estimator = (f"{mean} of each side's runs' {rule.statistic} ({k} baseline, {n} candidate "
                        f"runs), Student t on {df} degrees of freedom from the runs' own spread{floor}")
    result.verdict, result.reason = judge(result.ci, rule, "more runs per side (or a quieter host)")
    return result
