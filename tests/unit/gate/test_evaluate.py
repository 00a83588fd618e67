"""Verdicts on synthetic runs: equal runs pass, a real shift fails, too little data is
inconclusive, and the direction of "better" is respected."""

from __future__ import annotations

import numpy as np

from infbench.gate.evaluate import FAIL, INCONCLUSIVE, PASS, evaluate_rule, overall
from infbench.gate.rules import GateSettings, parse_rule
from infbench.gate.samples import RunSamples
from tests.support.gate_runs import synthetic_run

_run = synthetic_run


def _verdict(metric: str, stat: str, base: RunSamples, cand: RunSamples, tol: str = "5%") -> str:
    rule = parse_rule({"metric": metric, "statistic": stat, "max_regression": tol}, "rule")
    return evaluate_rule(rule, base, cand, GateSettings(replicates=1000), np.random.default_rng(0)).verdict


def test_equal_runs_pass_and_a_shift_fails() -> None:
    a, a2, slow = _run(3000, 1.0, 1), _run(3000, 1.0, 2), _run(3000, 1.12, 3)
    for metric, stat in (("e2el", "p50"), ("e2el", "mean"), ("itl", "p50"), ("step_time", "p50")):
        assert _verdict(metric, stat, a, a2) == PASS, metric
        assert _verdict(metric, stat, a, slow) == FAIL, metric


def test_too_little_data_is_inconclusive_not_pass() -> None:
    a, short = _run(3000, 1.0, 1), _run(40, 1.0, 4)
    assert _verdict("e2el", "p99", a, short) == INCONCLUSIVE  # p99 needs 1000 requests
    assert _verdict("e2el", "p50", a, _run(12, 1.0, 5)) == INCONCLUSIVE  # below min_requests
    assert _verdict("e2el", "p50", a, _run(60, 1.0, 6), tol="1%") == INCONCLUSIVE


def test_higher_is_better_for_throughput() -> None:
    a, slower = _run(3000, 1.0, 1), _run(3000, 1.3, 7)
    # the slower run makes fewer output tokens per request here, so throughput falls
    assert _verdict("output_tokens", "throughput", a, slower, tol="5%") == FAIL
    assert _verdict("output_tokens", "throughput", slower, a, tol="5%") == PASS


def test_overall_verdict() -> None:
    from infbench.gate.evaluate import RuleResult

    def r(v: str) -> RuleResult:
        return RuleResult("x", "e2el", "p50", "ms", "lower", "5%", "bootstrap", 1, 1, 0, (0, 0), True, v, "", 1, 1)

    assert overall([r(PASS), r(INCONCLUSIVE)]) == INCONCLUSIVE
    assert overall([r(INCONCLUSIVE), r(FAIL)]) == FAIL
    assert overall([r(PASS)]) == PASS
