"""Run-to-run noise from A/A runs: drift that is there is found, drift that is not is not
invented, and the rules file gets exactly the printed values with its comments kept."""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np
import pytest

from infbench.gate.noise import chi2_quantile, measure_noise
from infbench.gate.rules import GateSettings, load_rules, parse_rule, parse_rules
from infbench.gate.rules_file import percent, write_run_noise
from tests.support.gate_runs import Machine, make_workload, simulate, synthetic_run

SETTINGS = GateSettings(replicates=600)
RULES = [parse_rule({"metric": m, "statistic": s, "max_regression": "5%"}, "rule")
         for m, s in (("e2el", "p50"), ("tpot", "p50"), ("output_tokens", "throughput"))]


def _aa_runs(k: int, drift: float, seed: int) -> list:  # type: ignore[type-arg]
    w = make_workload(600, seed)
    return [simulate(w, Machine(drift=drift), 100 * seed + i) for i in range(k)]


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.label)
def test_drift_between_runs_is_measured(rule) -> None:  # type: ignore[no-untyped-def]
    row = measure_noise(rule, _aa_runs(10, 0.04, 1), SETTINGS, np.random.default_rng(0))
    assert row.run_noise is not None and 0.02 < row.run_noise < 0.065, row
    assert row.upper is not None and row.upper >= row.run_noise
    assert row.within is not None and row.between is not None and row.within < row.between
    assert row.pairs == 45 and len(row.values) == 10


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.label)
def test_no_drift_is_not_invented(rule) -> None:  # type: ignore[no-untyped-def]
    row = measure_noise(rule, _aa_runs(8, 0.0, 2), SETTINGS, np.random.default_rng(0))
    # the runs' own sampling error explains their spread; whatever is left is small
    assert row.run_noise is not None and row.run_noise < 0.01, row


def test_needs_three_runs_and_enough_data() -> None:
    with pytest.raises(ValueError, match="at least 3 runs"):
        measure_noise(RULES[0], _aa_runs(2, 0.0, 3), SETTINGS, np.random.default_rng(0))
    p99 = parse_rule({"metric": "e2el", "statistic": "p99", "max_regression": "5%"}, "rule")
    row = measure_noise(p99, [synthetic_run(100, 1.0, s) for s in range(3)], SETTINGS, np.random.default_rng(0))
    assert row.run_noise is None and "cannot support" in row.note


def test_written_values_round_up_and_read_back() -> None:
    assert percent(0.0123) == "1.3%" and percent(0.012) == "1.2%" and percent(0.0) == "0.0%"
    written = write_run_noise(None, [0.0123, None, 0.004, 0.031], runs=4)
    assert written.per_rule == ["1.3%", None, "0.4%", "3.1%"] and written.gate == "3.1%"
    back = parse_rules(tomllib.loads(written.text))
    assert [r.run_noise for r in back.rules] == [pytest.approx(0.013), None, pytest.approx(0.004),
                                                 pytest.approx(0.031)]
    assert back.settings.run_noise == pytest.approx(0.031)
    assert [(r.metric, r.statistic, r.max_regression) for r in back.rules] == \
        [(r.metric, r.statistic, r.max_regression) for r in load_rules(None).rules]


def test_a_rules_file_keeps_its_comments_and_other_fields(tmp_path: Path) -> None:
    source = (Path(__file__).resolve().parents[3] / "examples" / "ci" / "gates.toml").read_text()
    written = write_run_noise(source, [0.002, 0.011, None, 0.05, 0.02], runs=5)
    for line in source.splitlines():
        if line.startswith("#") or ("#" in line and "run_noise" not in line):
            assert line in written.text, line  # every comment survives, in place
    doc = tomllib.loads(written.text)
    assert [r.get("run_noise") for r in doc["rule"]] == ["0.2%", "1.1%", None, "5.0%", "2.0%"]
    assert doc["gate"]["run_noise"] == "5.0%" and doc["gate"]["confidence"] == 0.95
    # a comment the user wrote beside run_noise stays beside the new value
    assert '"0.2%" # server-side timing barely drifts between runs' in written.text.replace("  ", " ")
    with pytest.raises(ValueError, match="do not match"):
        write_run_noise(source, [0.01], runs=3)


@pytest.mark.parametrize(("p", "df", "exact"), [(0.05, 2, 0.1026), (0.05, 4, 0.7107), (0.05, 10, 3.9403),
                                                (0.975, 30, 46.979), (0.10, 3, 0.5844)])
def test_chi2_quantile(p: float, df: int, exact: float) -> None:
    assert chi2_quantile(p, df) == pytest.approx(exact, rel=0.002)
