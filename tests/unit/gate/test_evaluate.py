"""Verdicts on synthetic runs: identical runs pass, real shifts fail (everywhere, or only in
the tail, or in a share of the requests), too little data is inconclusive, one sign
convention throughout, and run_noise widens every method."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from infbench.gate.compat import pair_requests
from infbench.gate.evaluate import FAIL, INCONCLUSIVE, PASS, RuleResult, evaluate_rule, overall
from infbench.gate.rules import GateSettings, format_change, load_rules, parse_rule
from infbench.gate.samples import RunSamples
from infbench.gate.verdict import run_gate
from tests.support.gate_runs import Machine, make_workload, simulate, slow_some, synthetic_run

SETTINGS = GateSettings(replicates=1000)
QUIET = Machine(drift=0.0)  # no run-to-run drift: what the runs show is what the build did


def _rule(metric: str, stat: str, tol: str = "5%", **extra: str) -> object:
    return parse_rule({"metric": metric, "statistic": stat, "max_regression": tol, **extra}, "rule")


def _result(rule, base: RunSamples, cand: RunSamples, settings: GateSettings = SETTINGS) -> RuleResult:  # type: ignore[no-untyped-def]
    pairing, _ = pair_requests(base, cand, settings.min_requests) if base.fingerprint == cand.fingerprint \
        else (None, "")
    return evaluate_rule(rule, base, cand, settings, np.random.default_rng(0), pairing)


def test_unpaired_equal_runs_pass_and_a_shift_fails() -> None:
    a, a2, slow = synthetic_run(3000, 1.0, 1), synthetic_run(3000, 1.0, 2), synthetic_run(3000, 1.12, 3)
    for metric, stat in (("e2el", "p50"), ("e2el", "mean"), ("itl", "p50"), ("step_time", "p50")):
        assert _result(_rule(metric, stat, "8%"), a, a2).verdict == PASS, metric
        r = _result(_rule(metric, stat, "8%"), a, slow)
        assert r.verdict == FAIL and not r.paired, (metric, r)


def test_identical_runs_show_no_change_at_all() -> None:
    run = simulate(make_workload(400, 1), Machine(), 1)
    out = run_gate(run, run, load_rules(None))
    assert out.paired and out.verdict == PASS
    for r in out.results:
        assert r.change == 0.0 and r.ci is not None and r.ci[0] <= 0.0 <= r.ci[1], r


@pytest.mark.parametrize("lengths", ["lognormal", "heavy", "uniform"])
def test_paired_runs_catch_a_uniform_slowdown_that_unpaired_cannot_resolve(lengths: str) -> None:
    w = make_workload(400, 11, lengths=lengths)
    base, slow = simulate(w, QUIET, 1), simulate(w, QUIET, 2, decode=1.12, prefill=1.12)
    rule = _rule("e2el", "p50")
    paired = _result(rule, base, slow)
    assert paired.paired and paired.verdict == FAIL and paired.ci[0] > 0.05, paired
    unpaired = _result(rule, base, dataclasses.replace(slow, fingerprint="other"))
    assert not unpaired.paired
    assert unpaired.ci[1] - unpaired.ci[0] > 3 * (paired.ci[1] - paired.ci[0])


def test_a_regression_only_in_the_tail_fails_the_tail_rule_not_the_median() -> None:
    p99, p50 = _rule("tpot", "p99"), _rule("tpot", "p50")
    tail_fails = 0
    for seed in range(5):
        w = make_workload(2000, seed)
        base, cand = simulate(w, QUIET, 2 * seed), simulate(w, QUIET, 2 * seed + 1, hiccups=0.001)
        assert _result(p50, base, cand).verdict == PASS
        tail_fails += _result(p99, base, cand).verdict == FAIL
    assert tail_fails >= 4


def test_a_regression_in_a_share_of_the_requests_fails_median_and_mean() -> None:
    w = make_workload(1000, 5)
    base = simulate(w, QUIET, 1)
    cand = slow_some(simulate(w, QUIET, 2), 0.4, 1.3, seed=3)  # 40% of requests 30% slower
    for stat in ("p50", "mean"):
        r = _result(_rule("e2el", stat), base, cand)
        assert r.verdict == FAIL and r.change > 0.08, r


def test_too_little_data_is_inconclusive_not_pass() -> None:
    a = synthetic_run(3000, 1.0, 1)
    assert _result(_rule("e2el", "p99"), a, synthetic_run(40, 1.0, 4)).verdict == INCONCLUSIVE
    short = _result(_rule("e2el", "p50"), a, synthetic_run(12, 1.0, 5))
    assert short.verdict == INCONCLUSIVE and "min_requests" in short.reason
    # 60 requests of a wide length mix pin a median down to no better than tens of percent
    for seed in range(6, 16):
        r = _result(_rule("e2el", "p50", "1%"), a, synthetic_run(60, 1.0, seed))
        assert r.ci[1] - r.ci[0] > 0.1, r


def test_one_sign_convention_for_change_interval_limit_and_reason() -> None:
    w = make_workload(1000, 7)
    base, slow = simulate(w, QUIET, 1), simulate(w, QUIET, 2, decode=1.25)
    thr = _result(_rule("output_tokens", "throughput"), base, slow)
    lat = _result(_rule("tpot", "p50"), base, slow)
    assert thr.verdict == FAIL and thr.change < 0 and thr.ci[1] < 0 and thr.tolerance == ">= -5.0%"
    assert lat.verdict == FAIL and lat.change > 0 and lat.ci[0] > 0 and lat.tolerance == "<= +5.0%"
    for r in (thr, lat):
        lo, hi = (format_change(v, True, r.unit) for v in r.ci)
        assert f"{lo} .. {hi}" in r.reason and format_change(r.limit, True, r.unit) in r.reason
    # the other way round it is an improvement, with the same signs flipped
    back = _result(_rule("output_tokens", "throughput"), slow, base)
    assert back.verdict == PASS and back.ci[0] > 0 and "improvement" in back.reason


@pytest.mark.parametrize("method", ["rank", "bootstrap"])
def test_run_noise_widens_every_method(method: str) -> None:
    w = make_workload(800, 9)
    base, cand = simulate(w, QUIET, 1), simulate(w, QUIET, 2)
    rule = _rule("e2el", "p50", method=method)
    bare = _result(rule, base, cand)
    noisy = _result(dataclasses.replace(rule, run_noise=0.03), base, cand)
    assert bare.verdict == PASS and noisy.verdict == INCONCLUSIVE
    assert noisy.ci[1] - noisy.ci[0] > 2 * (bare.ci[1] - bare.ci[0])
    assert noisy.change == bare.change


def test_unpaired_rank_honours_run_noise_too() -> None:
    a, b = synthetic_run(3000, 1.0, 1), synthetic_run(3000, 1.0, 2)
    rule = _rule("e2el", "p50", "10%", method="rank")
    bare, noisy = _result(rule, a, b), _result(dataclasses.replace(rule, run_noise=0.05), a, b)
    assert not bare.paired and noisy.ci[1] - noisy.ci[0] > 1.5 * (bare.ci[1] - bare.ci[0])


def test_absolute_tolerances_read_in_the_metrics_unit() -> None:
    w = make_workload(1000, 12)
    base, slow = simulate(w, QUIET, 1), simulate(w, QUIET, 2, decode=1.2)  # ~+1.2 ms per token
    ok = _result(_rule("tpot", "p50", "3ms"), base, slow)
    bad = _result(_rule("tpot", "p50", "0.5ms"), base, slow)
    assert ok.verdict == PASS and bad.verdict == FAIL and not ok.relative
    assert 0.8 < bad.change < 1.6 and bad.tolerance == "<= +0.5 ms"


def test_overall_verdict() -> None:
    def r(v: str) -> RuleResult:
        return RuleResult("x", "e2el", "p50", "ms", "lower", "<= +5.0%", "bootstrap", 1, 1, 0, (0, 0), True,
                          v, "", 1, 1)

    assert overall([r(PASS), r(INCONCLUSIVE)]) == INCONCLUSIVE
    assert overall([r(INCONCLUSIVE), r(FAIL)]) == FAIL
    assert overall([r(PASS)]) == PASS


def _zero_tpot(run: RunSamples, share: float, seed: int) -> RunSamples:
    """A share of the requests read every token after the first at once (a stalled client,
    or a server that sends several tokens per event): their TPOT measures 0."""
    tpot = run.per_request["tpot"].copy()
    hit = np.random.default_rng(seed).random(tpot.size) < share
    tpot[hit & np.isfinite(tpot)] = 0.0
    return dataclasses.replace(run, per_request={**run.per_request, "tpot": tpot})


@pytest.mark.parametrize(("share", "seed"), [(0.004, 1), (0.02, 2), (0.03, 3)])
def test_a_few_requests_with_a_zero_tpot_do_not_blind_the_rule(share: float, seed: int) -> None:
    """Two identical runs through the default gate were inconclusive on TPOT because one
    request in 400 measured 0 ms (the client, starved beside a busy neighbour, read its
    tokens in one go) and a ratio needs positive values: the whole rule said nothing."""
    w = make_workload(400, 20 + seed)
    base = simulate(w, QUIET, 1)
    same, slow = simulate(w, QUIET, 2), simulate(w, QUIET, 3, decode=1.10, prefill=1.10)
    rule = _rule("tpot", "p50")
    b = _zero_tpot(base, share, seed)
    ok = _result(rule, b, _zero_tpot(same, share, seed + 100))
    assert ok.verdict == PASS and "left out" in ok.estimator, ok
    bad = _result(rule, b, _zero_tpot(slow, share, seed + 200))
    assert bad.verdict == FAIL and bad.ci is not None and bad.ci[0] > 0.05, bad


def test_a_metric_mostly_measured_as_zero_is_inconclusive_and_says_why() -> None:
    w = make_workload(400, 30)
    base, cand = simulate(w, QUIET, 1), simulate(w, QUIET, 2)
    r = _result(_rule("tpot", "p50"), base, _zero_tpot(cand, 0.2, 5))
    assert r.verdict == INCONCLUSIVE and r.ci is None
    assert "had tpot <= 0" in r.reason and "candidate requests" in r.reason, r.reason
