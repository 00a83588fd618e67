"""Rules files: defaults, tolerances, and one clear line naming the bad field."""

from __future__ import annotations

from pathlib import Path

import pytest

from infbench.gate.rules import RulesError, load_rules, parse_rules


def test_default_rules_cover_latency_and_throughput() -> None:
    metrics = {r.metric for r in load_rules(None).rules}
    assert {"ttft", "tpot", "e2el", "output_tokens"} <= metrics


def test_tolerances_relative_and_absolute(tmp_path: Path) -> None:
    f = tmp_path / "g.toml"
    f.write_text('[gate]\nconfidence = 0.9\nrun_noise = "2%"\n'
                 '[[rule]]\nmetric = "ttft"\nstatistic = "p99"\nmax_regression = "0.5s"\n'
                 '[[rule]]\nmetric = "requests"\nstatistic = "goodput"\nslo = "ttft=1s"\nmax_regression = "10%"\n')
    rs = load_rules(f)
    assert rs.settings.confidence == 0.9 and rs.settings.run_noise == pytest.approx(0.02)
    ttft, good = rs.rules
    assert (ttft.max_regression, ttft.relative, ttft.quantile) == (500.0, False, 0.99)
    assert good.direction == "higher" and good.slo_ms == {"ttft": 1000.0}


@pytest.mark.parametrize(("doc", "field"), [
    ({"rule": [{"metric": "latency", "max_regression": "5%"}]}, "rule[0].metric"),
    ({"rule": [{"metric": "ttft", "statistic": "p0", "max_regression": "5%"}]}, "rule[0].statistic"),
    ({"rule": [{"metric": "ttft"}]}, "rule[0].max_regression"),
    ({"rule": [{"metric": "ttft", "max_regression": "5/s"}]}, "rule[0].max_regression"),
    ({"rule": [{"metric": "output_tokens", "statistic": "p50", "max_regression": "5%"}]}, "rule[0].statistic"),
    ({"rule": [{"metric": "itl", "method": "rank", "max_regression": "5%"}]}, "rule[0].method"),
    ({"rule": [{"metric": "ttft", "max_regression": "5%", "tolerance": 1}]}, "rule[0].tolerance"),
    ({"gate": {"inconclusive": "maybe"}, "rule": [{"metric": "ttft", "max_regression": "5%"}]},
     "gate.inconclusive"),
    ({}, "rule"),
])
def test_bad_rules_name_the_field(doc: dict, field: str) -> None:
    with pytest.raises(RulesError) as exc:
        parse_rules(doc)
    assert str(exc.value).startswith(field + ":") or str(exc.value).startswith(field)
    assert "\n" not in str(exc.value)


def test_invalid_toml_is_one_line(tmp_path: Path) -> None:
    f = tmp_path / "bad.toml"
    f.write_text("[[rule]\nmetric=")
    with pytest.raises(RulesError, match="not valid TOML"):
        load_rules(f)
