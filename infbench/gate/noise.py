"""Run-to-run noise from repeated runs of one build (A/A runs).

A gate interval built from two runs' requests knows their sampling error, not how much the
same build moves from one run to the next on a shared machine (other tenants, CPU frequency,
the client's own scheduling). Given k >= 3 runs of one build and workload, each rule is
evaluated on every pair of runs exactly as the gate would (paired when the runs sent the
same requests), giving each pair's observed change c (on the log scale for a relative
tolerance) and its sampling variance w^2 (from the interval). If each run is off by its own
drift of sd sigma, E[c^2] = 2 sigma^2 + w^2, so

    run_noise = sqrt(max(0, mean over pairs of (c^2 - w^2) / 2))

is the drift the gate adds back per run. With few runs it is rough: an upper confidence
bound (chi-square on k - 1 degrees of freedom) is reported beside it; the rules file gets the
estimate itself, since a bound several times too large makes every gate inconclusive.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import asdict, dataclass, field
from statistics import NormalDist
from typing import Any

import numpy as np

from infbench.gate.compat import compare_runs, pair_requests
from infbench.gate.evaluate import evaluate_rule, run_value
from infbench.gate.rules import GateSettings, Rule
from infbench.gate.samples import RunSamples

MIN_RUNS = 3


@dataclass
class NoiseRow:
    rule: str
    values: list[float] = field(default_factory=list)  # each run's statistic
    pairs: int = 0  # run pairs compared
    between: float | None = None  # rms of the observed changes between runs, per run
    within: float | None = None  # rms sampling error of a change, per run
    run_noise: float | None = None  # the estimate: what the rules file gets
    upper: float | None = None  # one-sided upper bound at the gate's confidence
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _chi2_cdf(x: float, df: int) -> float:
    """P(chi2_df <= x): the regularized lower incomplete gamma P(df/2, x/2), by its series."""
    if x <= 0:
        return 0.0
    a, y = df / 2.0, x / 2.0
    term = total = 1.0 / a
    n = 0
    while term > total * 1e-15 and n < 10_000:
        n += 1
        term *= y / (a + n)
        total += term
    return min(1.0, math.exp(-y + a * math.log(y) - math.lgamma(a)) * total)


def chi2_quantile(p: float, df: int) -> float:
    """The chi-square quantile, by bisection of the CDF (no SciPy in the base install)."""
    lo, hi = 0.0, max(1.0, df + 20.0 * math.sqrt(2.0 * df))
    for _ in range(200):
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if _chi2_cdf(mid, df) < p else (lo, mid)
    return (lo + hi) / 2.0


def _scale(rule: Rule, v: float) -> float:
    return math.log1p(v) if rule.relative else v


def measure_noise(rule: Rule, runs: list[RunSamples], settings: GateSettings,
                  rng: np.random.Generator) -> NoiseRow:
    """The run-to-run drift of `rule`'s comparison across `runs` (one build, one workload)."""
    if len(runs) < MIN_RUNS:
        raise ValueError(f"runs: {len(runs)} given; run-to-run noise needs at least {MIN_RUNS} runs of one build")
    row = NoiseRow(rule.label)
    quiet = dataclasses.replace(settings, run_noise=0.0)
    bare = dataclasses.replace(rule, run_noise=None)
    z = NormalDist().inv_cdf(1.0 - (1.0 - settings.confidence) / 2.0)
    changes, variances = [], []
    for a, b in itertools.combinations(runs, 2):
        pairing = pair_requests(a, b, settings.min_requests)[0] if compare_runs(a, b).same_requests else None
        r = evaluate_rule(bare, a, b, quiet, rng, pairing)
        if r.ci is None or r.change is None:
            row.note = f"runs {a.run.run_id} and {b.run.run_id} cannot support this rule: {r.reason}"
            return row
        changes.append(_scale(rule, r.change))
        variances.append(((_scale(rule, r.ci[1]) - _scale(rule, r.ci[0])) / (2.0 * z)) ** 2)
    row.values = [run_value(rule, s, settings) for s in runs]
    k = len(runs)
    between2 = float(np.mean(np.square(changes))) / 2.0
    within2 = float(np.mean(variances)) / 2.0
    row.pairs = len(changes)
    row.between, row.within = math.sqrt(between2), math.sqrt(within2)
    row.run_noise = math.sqrt(max(0.0, between2 - within2))
    # sd upper bound: (k - 1) s^2 / sigma^2 ~ chi2(k - 1), with k - 1 independent comparisons
    hi2 = between2 * (k - 1) / chi2_quantile(1.0 - settings.confidence, k - 1)
    row.upper = math.sqrt(max(0.0, hi2 - within2))
    if not rule.relative:
        row.note = "absolute tolerance: run_noise is relative, so this is over the baseline value"
        base = abs(row.values[0]) if row.values and row.values[0] else 0.0
        if base:
            row.run_noise, row.upper = row.run_noise / base, row.upper / base
        else:
            row.run_noise = row.upper = None
            row.note = "the statistic is zero: no relative noise"
            return row
    if row.run_noise == 0.0:
        row.note = "; ".join(filter(None, [row.note, "runs differ no more than their sampling error explains"]))
    if k < 5:
        row.note = "; ".join(filter(None, [row.note, f"only {k} runs: the estimate is rough (see the bound)"]))
    return row
