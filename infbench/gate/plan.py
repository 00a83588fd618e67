"""Canary sizing: from a baseline's own variance, how much candidate data a gate needs.

For each rule the baseline's bootstrap gives the standard error of the statistic at its own
size; scaled by the square root of that size it becomes a per-unit spread sigma (units are
requests, or decode steps for the engine's step time). The sizes assume an unpaired
comparison; a candidate that repeats the baseline's requests (same seed and request count)
is compared pair by pair and usually needs fewer. A candidate of size n then
yields an interval of the change with standard error sqrt(sigma^2 (1/n_base + 1/n) + 2 noise^2),
and the gate needs

- to *catch* a true regression `change` (> tolerance): change - tolerance >= (z_conf + z_power) se
- to *clear* an unchanged build: tolerance >= (z_conf + z_power) se
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from statistics import NormalDist
from typing import Any

import numpy as np

from infbench.gate.evaluate import estimate
from infbench.gate.rules import METRICS, GateSettings, Rule
from infbench.gate.samples import RunSamples
from infbench.gate.sides import NotEnoughData, goodput_slo


@dataclass
class PlanRow:
    rule: str
    unit_of_size: str  # requests | steps
    baseline_value: float | None
    baseline_size: float
    relative_se: float | None  # of the baseline statistic at its size
    to_detect: float | None  # candidate size needed to fail a regression of `change`
    to_clear: float | None  # candidate size needed for an unchanged build to pass
    seconds_to_detect: float | None
    seconds_to_clear: float | None
    note: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _size_needed(margin: float, sigma: float, n_base: float, noise: float, z: float) -> float | None:
    """Smallest n with z * sqrt(sigma^2 (1/n_base + 1/n) + 2 noise^2) <= margin; None: never."""
    if margin <= 0:
        return None
    room = (margin / z) ** 2 - sigma**2 / n_base - 2.0 * noise**2
    if room <= 0:
        return None
    return sigma**2 / room


def plan_rule(rule: Rule, base: RunSamples, settings: GateSettings, change: float, power: float,
              rng: np.random.Generator) -> PlanRow:
    family = METRICS[rule.metric].family
    span = max(base.window_s[1] - base.window_s[0], 1e-9)
    rate = base.n_requests / span  # requests/s
    unit = "steps" if family == "step" else "requests"
    row = PlanRow(rule.label, unit, None, 0.0, None, None, None, None, None, "")
    try:
        slo = goodput_slo(rule, base, base) if rule.statistic == "goodput" else None
        est = estimate(rule, base, settings, rng, slo)
    except NotEnoughData as exc:
        row.note = f"baseline cannot support this rule: {exc}"
        return row
    if est.value == 0:
        row.note = "baseline statistic is zero: no relative size"
        return row
    size = float(est.n)
    rel_se = float(np.std(est.replicates)) / abs(est.value)
    sigma = rel_se * math.sqrt(size)
    tol = rule.max_regression if rule.relative else rule.max_regression / abs(est.value)
    z = NormalDist().inv_cdf(1 - (1 - settings.confidence) / 2) + NormalDist().inv_cdf(power)
    noise = settings.run_noise if rule.run_noise is None else rule.run_noise
    detect = _size_needed(change - tol, sigma, size, noise, z)
    clear = _size_needed(tol, sigma, size, noise, z)
    if unit == "requests":  # the gate calls anything under min_requests inconclusive
        detect = None if detect is None else max(detect, settings.min_requests)
        clear = None if clear is None else max(clear, settings.min_requests)
    row.baseline_value, row.baseline_size, row.relative_se = est.value, size, rel_se
    row.to_detect, row.to_clear = detect, clear
    per_second = {"requests": rate, "steps": est.n / span}[unit]
    row.seconds_to_detect = detect / per_second if detect is not None else None
    row.seconds_to_clear = clear / per_second if clear is not None else None
    notes = []
    if change <= tol:
        notes.append(f"a {change:.0%} change is within the {rule.tolerance_text} tolerance: the gate "
                     "is not meant to fail it")
    elif detect is None:
        notes.append("cannot be detected against this baseline at any candidate size: "
                     "a larger baseline (or less run noise) is needed")
    if clear is None:
        notes.append("an unchanged build cannot be shown within tolerance against this baseline")
    if noise == 0:
        notes.append("run_noise = 0: run-to-run drift is not counted (set it from repeated A/A runs)")
    row.note = "; ".join(notes)
    return row
