"""Run-to-run noise from A/A runs: drift that is there is found, drift that is not is not
invented, and the suggested rules file reads back with the measured values."""

from __future__ import annotations

import tomllib

import numpy as np
import pytest

from infbench.gate.noise import chi2_quantile, measure_noise, suggested_toml
from infbench.gate.rules import GateSettings, parse_rule, parse_rules
from tests.support.gate_runs import synthetic_run

SETTINGS = GateSettings(replicates=600)


_run = synthetic_run


RULE = parse_rule({"metric": "e2el", "statistic": "p50", "max_regression": "5%"}, "rule")


def test_drift_between_runs_is_measured() -> None:
    scales = np.exp(np.random.default_rng(7).normal(0.0, 0.05, 20))  # 5% drift run to run
    runs = [_run(2000, float(s), seed) for seed, s in enumerate(scales)]
    row = measure_noise(RULE, runs, SETTINGS, np.random.default_rng(0))
    assert row.run_noise is not None and 0.03 < row.run_noise < 0.075, row
    assert row.upper is not None and row.upper >= row.run_noise
    assert row.between is not None and row.within is not None and row.within < row.between


def test_no_drift_is_not_invented() -> None:
    runs = [_run(2000, 1.0, seed) for seed in range(8)]
    row = measure_noise(RULE, runs, SETTINGS, np.random.default_rng(0))
    # Each run's own sampling error explains the spread; whatever is left is small.
    assert row.run_noise is not None and row.run_noise < 0.01, row
    assert row.upper is not None and row.upper < 0.02, row


def test_needs_three_runs_and_enough_data() -> None:
    with pytest.raises(ValueError, match="at least 3 runs"):
        measure_noise(RULE, [_run(500, 1.0, 1), _run(500, 1.0, 2)], SETTINGS, np.random.default_rng(0))
    p99 = parse_rule({"metric": "e2el", "statistic": "p99", "max_regression": "5%"}, "rule")
    row = measure_noise(p99, [_run(100, 1.0, s) for s in range(3)], SETTINGS, np.random.default_rng(0))
    assert row.run_noise is None and "cannot support" in row.note


def test_suggested_rules_read_back_with_the_measured_noise() -> None:
    rules = [RULE, parse_rule({"metric": "output_tokens", "statistic": "throughput", "max_regression": "10%"}, "r"),
             parse_rule({"metric": "e2el", "statistic": "p50", "max_regression": "30ms", "method": "rank",
                         "name": "e2e median"}, "r")]
    runs = [_run(2000, float(s), i) for i, s in enumerate(np.exp(np.random.default_rng(3).normal(0, 0.04, 6)))]
    rows = [measure_noise(r, runs, SETTINGS, np.random.default_rng(0)) for r in rules]
    text = suggested_toml(rows, rules, SETTINGS)
    back = parse_rules(tomllib.loads(text))
    assert [(r.metric, r.statistic, r.max_regression, r.relative, r.method, r.name) for r in back.rules] == \
        [(r.metric, r.statistic, r.max_regression, r.relative, r.method, r.name) for r in rules]
    for parsed, row in zip(back.rules, rows, strict=True):
        assert parsed.run_noise is not None and row.upper is not None
        assert row.upper <= parsed.run_noise < row.upper + 0.0011  # rounded up to 0.1%
    assert back.settings.run_noise == max(r.run_noise for r in back.rules)


@pytest.mark.parametrize(("p", "df", "exact"), [(0.05, 2, 0.1026), (0.05, 4, 0.7107), (0.05, 10, 3.9403), (0.975, 30, 46.979),
                                                (0.10, 3, 0.5844)])
def test_chi2_quantile(p: float, df: int, exact: float) -> None:
    assert chi2_quantile(p, df) == pytest.approx(exact, rel=0.002)
