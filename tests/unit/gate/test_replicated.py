"""Several runs per side: identical builds on a drifting host do not fail, a regression larger
than the drift does, the interval covers the truth about as often as it says, and runs that
agree by chance do not make it narrower than one run's own sampling error."""

from __future__ import annotations

import numpy as np
import pytest

from infbench.gate.evaluate import FAIL, INCONCLUSIVE, PASS
from infbench.gate.replicated import evaluate_replicated, sampling_floor, t_central, t_quantile
from infbench.gate.rules import GateSettings, RuleSet, load_rules, parse_rule
from infbench.gate.verdict import WorkloadMismatch, run_gate, run_gate_runs
from tests.support.gate_runs import Machine, make_workload, simulate

SETTINGS = GateSettings(replicates=300)
TPOT = parse_rule({"metric": "tpot", "statistic": "p50", "max_regression": "5%"}, "rule")
DEFAULTS = RuleSet(load_rules(None).rules, SETTINGS)  # the default rules, fewer replicates
THROUGHPUT = parse_rule({"metric": "output_tokens", "statistic": "throughput", "max_regression": "5%"}, "rule")


@pytest.mark.parametrize(("p", "df", "exact"), [
    (0.975, 1, 12.7062), (0.975, 2, 4.3027), (0.975, 3, 3.1824), (0.975, 4, 2.7764),
    (0.975, 7, 2.3646), (0.975, 10, 2.2281), (0.95, 5, 2.0150), (0.995, 12, 3.0545), (0.025, 6, -2.4469),
])
def test_t_quantile(p: float, df: int, exact: float) -> None:
    assert t_quantile(p, df) == pytest.approx(exact, abs=2e-4)
    assert t_central(abs(exact), df) == pytest.approx(abs(2 * p - 1), abs=1e-4)


def _runs(w, drift: float, seeds: range, **regress: float) -> list:  # type: ignore[no-untyped-def]
    return [simulate(w, Machine(drift=drift), s, **regress) for s in seeds]


@pytest.mark.parametrize(("drift", "k", "n"), [(0.12, 2, 2), (0.2, 3, 2), (0.07, 2, 1)])
def test_identical_builds_on_a_drifting_host_do_not_fail(drift: float, k: int, n: int) -> None:
    """One run per side claims a change that is only drift; the runs' own spread does not."""
    w = make_workload(300, 11)
    one_run_wrong = several_fail = 0
    trials = 20
    for t in range(trials):
        runs = _runs(w, drift, range(100 * t, 100 * t + k + n))
        out = run_gate_runs(runs[:k], runs[k:], DEFAULTS)
        several_fail += out.verdict == FAIL
        one = run_gate(runs[0], runs[-1], DEFAULTS)
        one_run_wrong += any(not r.ci[0] <= 0.0 <= r.ci[1] for r in one.results)
    assert several_fail <= 1, several_fail
    assert one_run_wrong >= trials // 2, one_run_wrong  # the case this exists for


@pytest.mark.parametrize(("drift", "decode", "k", "n"), [(0.04, 1.5, 3, 3), (0.1, 2.0, 3, 2), (0.02, 1.25, 2, 2)])
def test_a_regression_beyond_the_drift_fails(drift: float, decode: float, k: int, n: int) -> None:
    w = make_workload(300, 12)
    base = _runs(w, drift, range(k))
    slow = _runs(w, drift, range(50, 50 + n), decode=decode)
    for rule in (TPOT, THROUGHPUT):
        r = evaluate_replicated(rule, base, slow, SETTINGS, np.random.default_rng(0))
        assert r.verdict == FAIL, r
        lo, hi = r.ci
        truth = decode - 1.0 if rule is TPOT else 1.0 / decode - 1.0
        assert lo < truth < hi or abs(r.change - truth) < 0.1, r


def test_intervals_cover_the_truth_about_as_often_as_they_say() -> None:
    """A/A with 10% drift, three runs against two: the 95% interval holds 0 in most trials
    (a t interval on the runs; a one-run interval holds it far less often)."""
    w = make_workload(200, 13)
    covered = 0
    trials = 40
    for t in range(trials):
        runs = _runs(w, 0.10, range(1000 + 10 * t, 1000 + 10 * t + 5))
        r = evaluate_replicated(THROUGHPUT, runs[:3], runs[3:], SETTINGS, np.random.default_rng(t))
        covered += r.ci[0] <= 0.0 <= r.ci[1]
        assert r.run_spread is not None
    assert covered >= 0.85 * trials, covered


def test_runs_that_agree_by_chance_keep_the_sampling_floor() -> None:
    """No drift: whatever the runs' spread, the interval is at least what the requests give."""
    w = make_workload(120, 14)
    runs = _runs(w, 0.0, range(3))
    r = evaluate_replicated(TPOT, runs[:2], runs[2:], SETTINGS, np.random.default_rng(0))
    floor = sampling_floor(TPOT, runs, SETTINGS, np.random.default_rng(1), None)
    half = (np.log1p(r.ci[1]) - np.log1p(r.ci[0])) / 2.0
    assert floor > 0 and half >= 0.9 * t_quantile(0.975, 1) * np.sqrt(floor * 1.5), (half, floor)
    with pytest.raises(ValueError, match="given twice"):
        run_gate_runs([runs[0], runs[0]], [runs[1]], DEFAULTS)


def test_a_small_regression_under_large_drift_is_inconclusive_not_pass() -> None:
    w = make_workload(300, 15)
    r = evaluate_replicated(TPOT, _runs(w, 0.2, range(2)), _runs(w, 0.2, range(60, 61), decode=1.15),
                            SETTINGS, np.random.default_rng(0))
    assert r.verdict == INCONCLUSIVE and "more runs per side" in r.reason, r


def test_steady_identical_builds_pass() -> None:
    w = make_workload(400, 16)
    runs = _runs(w, 0.005, range(6))
    out = run_gate_runs(runs[:3], runs[3:], DEFAULTS)
    assert out.verdict == PASS, [(r.rule, r.change, r.ci) for r in out.results]
    assert out.runs == 6 and not out.paired


def test_needs_three_runs_and_one_workload() -> None:
    w = make_workload(100, 17)
    a, b = _runs(w, 0.0, range(2))
    with pytest.raises(ValueError, match="at least one per side and 3 in all"):
        evaluate_replicated(TPOT, [a], [b], SETTINGS, np.random.default_rng(0))
    other = simulate(make_workload(100, 17, lengths="uniform"), Machine(), 3)
    with pytest.raises(WorkloadMismatch, match=other.run.run_id):
        run_gate_runs([a, b], [other], DEFAULTS)
    out = run_gate_runs([a, b], [other], DEFAULTS, allow_different_workloads=True)
    assert any("workloads differ (allowed)" in x for x in out.warnings)
    # the same load with other requests (another seed) is compared, each run on its own mix
    unpaired = run_gate_runs([a, b], [simulate(make_workload(100, 18), Machine(drift=0.0), 4)], DEFAULTS)
    assert unpaired.verdict != FAIL and all(r.ci is not None for r in unpaired.results)
