"""Run-to-run noise from repeated runs of one build (A/A runs).

A gate interval built from one run's requests knows that run's sampling error, not how much
the same statistic moves from one run to the next on a shared machine (other tenants, CPU
frequency, the client's own scheduling). Given k >= 3 runs of the same build and workload,
per rule:

    between = sd(statistic over runs) / mean          (what repeated runs show)
    within  = rms(each run's bootstrap s.e.) / mean   (what one run's interval already covers)
    run_noise = sqrt(max(0, between^2 - within^2))    (the rest: drift between runs)

which is the `run_noise` the gate spreads each run's replicates by (`with_run_noise`). With
few runs the estimate is rough, so an upper confidence bound (chi-square on k - 1 degrees of
freedom) is reported beside it and is what the suggested rules use.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from infbench.gate.evaluate import NotEnoughData, estimate, goodput_slo
from infbench.gate.rules import METRICS, GateSettings, Rule
from infbench.gate.samples import RunSamples

MIN_RUNS = 3


@dataclass
class NoiseRow:
    rule: str
    values: list[float] = field(default_factory=list)
    between: float | None = None  # relative sd of the statistic across runs
    within: float | None = None  # rms relative standard error of one run
    run_noise: float | None = None  # point estimate
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


def measure_noise(rule: Rule, runs: list[RunSamples], settings: GateSettings,
                  rng: np.random.Generator) -> NoiseRow:
    """The run-to-run drift of `rule`'s statistic across `runs` (one build, one workload)."""
    if len(runs) < MIN_RUNS:
        raise ValueError(f"runs: {len(runs)} given; run-to-run noise needs at least {MIN_RUNS} runs of one build")
    row = NoiseRow(rule.label)
    values, rel_se = [], []
    slo = goodput_slo(rule, runs[0], runs[0]) if rule.statistic == "goodput" else None
    for run in runs:
        try:
            est = estimate(rule, run, settings, rng, slo)
        except NotEnoughData as exc:
            row.note = f"run {run.run.run_id} cannot support this rule: {exc}"
            return row
        values.append(est.value)
        rel_se.append(float(np.std(est.replicates)) / abs(est.value) if est.value else math.inf)
    row.values = values
    mean = float(np.mean(values))
    if mean == 0 or not all(map(math.isfinite, rel_se)):
        row.note = "the statistic is zero in some run: no relative noise"
        return row
    k = len(values)
    between = float(np.std(values, ddof=1)) / abs(mean)
    within = math.sqrt(float(np.mean(np.square(rel_se))))
    # sd upper bound: (k - 1) s^2 / sigma^2 ~ chi2(k - 1), so sigma <= s sqrt((k - 1) / chi2_{alpha})
    between_hi = between * math.sqrt((k - 1) / chi2_quantile(1.0 - settings.confidence, k - 1))
    row.between, row.within = between, within
    row.run_noise = math.sqrt(max(0.0, between**2 - within**2))
    row.upper = math.sqrt(max(0.0, between_hi**2 - within**2))
    if row.run_noise == 0.0:
        row.note = "runs differ no more than one run's own sampling error explains"
    if k < 5:
        row.note = "; ".join(filter(None, [row.note, f"only {k} runs: the bound is wide, more runs tighten it"]))
    return row


def _rule_lines(rule: Rule) -> list[str]:
    """A rule as the rules file writes it (only fields that differ from the defaults)."""
    tol = f'"{rule.max_regression * 100:g}%"' if rule.relative else f"{rule.max_regression:g}"
    lines = ["[[rule]]"]
    if rule.name:
        lines.append(f"name = {json.dumps(rule.name)}")
    lines += [f'metric = "{rule.metric}"', f'statistic = "{rule.statistic}"', f"max_regression = {tol}"]
    if rule.direction != METRICS[rule.metric].better:
        lines.append(f'direction = "{rule.direction}"')
    if rule.method != "bootstrap":
        lines.append(f'method = "{rule.method}"')
    if rule.slo_ms:
        lines.append('slo = "' + ",".join(f"{k}={v:g}ms" for k, v in rule.slo_ms.items()) + '"')
    return lines


def suggested_toml(rows: list[NoiseRow], rules: list[Rule], settings: GateSettings) -> str:
    """A rules file with each rule's measured `run_noise` (its upper bound, rounded up to 0.1%)."""
    def pct(v: float) -> str:
        return f'"{math.ceil(v * 1000 - 1e-9) / 10:.1f}%"'

    measured = [r.upper for r in rows if r.upper is not None]
    lines = ["[gate]", f"confidence = {settings.confidence:g}", f'inconclusive = "{settings.inconclusive}"',
             f"min_requests = {settings.min_requests}"]
    if measured:
        lines.append(f"run_noise = {pct(max(measured))}   # the largest measured below")
    for row, rule in zip(rows, rules, strict=True):
        lines += ["", *_rule_lines(rule)]
        if row.upper is not None:
            lines.append(f"run_noise = {pct(row.upper)}   # measured from {len(row.values)} runs")
        else:
            lines.append(f"# run_noise not measured: {row.note}")
    return "\n".join(lines) + "\n"
