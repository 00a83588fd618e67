"""Calibration of the default gate on simulated runs with the noise real runs have (see
tests/support/gate_runs.py): identical builds pass, a real regression fails, and intervals
cover the true change at about their stated level.

Each pair draws its own workload and machine from ranges (length mix, loop, concurrency,
step time, jitter, stalls, drift), so no single case is tuned for. Bootstrap replicates are
500 instead of 2000: an interval's end then moves by about 0.12 of its standard error from
Monte Carlo noise, which changes these rates by well under a percent.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from infbench.gate.compat import pair_requests
from infbench.gate.evaluate import FAIL, PASS, evaluate_rule
from infbench.gate.rules import RuleSet, load_rules, parse_rule
from infbench.gate.verdict import run_gate
from tests.support.gate_runs import Machine, Workload, make_workload, simulate

DEFAULT = load_rules(None)
FAST = dataclasses.replace(DEFAULT.settings, replicates=500)


def _draw(i: int, n: int, drift: tuple[float, float] = (0.0, 0.01), workload_seed: int | None = None,
          open_loops: bool = True) -> tuple[Workload, Machine]:
    """A realistic workload and machine for pair i (another `workload_seed`: the same kind of
    workload, other requests; every fourth an open loop unless `open_loops` is false)."""
    rng = np.random.default_rng([i, 77])
    lengths = ("lognormal", "heavy", "uniform")[i % 3]
    concurrency = int(rng.choice([4, 8, 16, 32]))
    rate = float(rng.uniform(5, 40)) if open_loops and i % 4 == 3 else None
    machine = Machine(step_ms=float(rng.uniform(5, 30)), prefill_us_per_token=float(rng.uniform(10, 60)),
                      jitter=float(rng.uniform(0.02, 0.08)), stall_share=float(rng.uniform(0.002, 0.015)),
                      stall_ms=float(rng.uniform(3, 15)), drift=float(rng.uniform(*drift)),
                      client_ms=float(rng.uniform(0.02, 0.2)))
    seed = 1000 + i if workload_seed is None else workload_seed
    w = make_workload(n, seed, lengths=lengths, concurrency=concurrency, rate=rate)
    return w, machine


def test_identical_builds_pass_the_default_rules() -> None:
    not_pass = []
    for i in range(100):
        w, m = _draw(i, 400)
        out = run_gate(simulate(w, m, 2 * i), simulate(w, m, 2 * i + 1), dataclasses.replace(DEFAULT, settings=FAST))
        assert out.paired
        if out.verdict != PASS:
            not_pass.append((i, [(r.rule, r.verdict, r.ci) for r in out.results if r.verdict != PASS]))
    assert len(not_pass) <= 5, not_pass


def test_a_ten_percent_tpot_regression_fails() -> None:
    tpot = RuleSet(tuple(r for r in DEFAULT.rules if r.metric == "tpot"), FAST)
    verdicts = []
    for i in range(60):
        w, m = _draw(i, 2000)
        base, slow = simulate(w, m, 2 * i), simulate(w, m, 2 * i + 1, decode=1.10)
        verdicts.append(run_gate(base, slow, tpot).results[0].verdict)
    assert verdicts.count(FAIL) >= 0.9 * len(verdicts), verdicts


def test_a_noisy_machine_makes_identical_builds_inconclusive_not_failing() -> None:
    """Long, frequent stalls at high concurrency: 400 requests cannot tell 5% apart, and
    the gate must say so rather than blame the build."""
    fails = 0
    for i in range(40):
        w = make_workload(400, 500 + i, lengths=("lognormal", "heavy")[i % 2], concurrency=32)
        m = Machine(stall_share=0.03, stall_ms=20.0, jitter=0.1, drift=0.0)
        out = run_gate(simulate(w, m, 2 * i), simulate(w, m, 2 * i + 1), dataclasses.replace(DEFAULT, settings=FAST))
        fails += out.verdict == FAIL
    assert fails <= 2


@pytest.mark.slow  # 2 x 100 pairs x 4 rules: ~10-20 s on a shared 2-core machine
@pytest.mark.parametrize("drift", [0.0, 0.02])
def test_intervals_cover_the_true_change(drift: float) -> None:
    """The 95% intervals of an 8% slower device (every step and prefill 8% longer: TPOT, ITL
    and a closed loop's throughput move by exactly that) cover the true change, for a median,
    a mean, a tail quantile and the throughput; with run-to-run drift of sd 2% per run,
    once run_noise says so. Measured over these 100 pairs: 4-10 misses per rule without
    drift, 5-11 with it (nominal 5; the overlap correction is approximate, and the drift
    draws here alone put 8 pairs beyond 1.96 sd); errors in units of the interval's own
    standard error have a root mean square of 1.02-1.16."""
    settings = dataclasses.replace(FAST, run_noise=drift)
    rules = [parse_rule({"metric": m, "statistic": s, "max_regression": "5%"}, "r")
             for m, s in (("tpot", "p50"), ("tpot", "mean"), ("itl", "p90"), ("output_tokens", "throughput"))]
    truth = {"tpot": math.log(1.08), "itl": math.log(1.08), "output_tokens": -math.log(1.08)}
    z: dict[str, list[float]] = {r.label: [] for r in rules}
    for i in range(100):
        w, m = _draw(i, 400, drift=(drift, drift), open_loops=False)  # closed: throughput follows speed
        base, slow = simulate(w, m, 2 * i), simulate(w, m, 2 * i + 1, decode=1.08, prefill=1.08)
        pairing, _ = pair_requests(base, slow, settings.min_requests)
        for rule in rules:
            r = evaluate_rule(rule, base, slow, settings, np.random.default_rng(i), pairing)
            lo, hi = (math.log1p(v) for v in r.ci)
            z[rule.label].append((math.log1p(r.change) - truth[rule.metric]) / ((hi - lo) / 3.92))
    for label, errors in z.items():
        e = np.abs(errors)
        assert (e > 1.96).sum() <= 12 and np.sqrt(np.mean(e**2)) < 1.25, (label, np.round(np.sort(e)[-12:], 2))


def test_without_pairing_identical_builds_rarely_fail() -> None:
    """Runs that do not pair (another seed) are compared unpaired: wider intervals, and an
    identical build still fails no more often than the interval's level allows."""
    fails = 0
    for i in range(40):
        w, m = _draw(i, 1000)
        other, _ = _draw(i, 1000, workload_seed=5000 + i)
        out = run_gate(simulate(w, m, 2 * i), simulate(other, m, 2 * i + 1),
                       dataclasses.replace(DEFAULT, settings=FAST))
        assert not out.paired
        fails += out.verdict == FAIL
    assert fails <= 2
