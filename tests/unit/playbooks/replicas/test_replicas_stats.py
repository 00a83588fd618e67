"""The matched-load statistic on synthetic fleets with a known truth: a slower replica is found
at equal load with an interval around its true slowdown, a replica given more load on a steep
latency curve is busier and not slower, and noise alone (including shocks shared by a
replica-second) finds nothing."""

from __future__ import annotations

import numpy as np
import pytest

from playbooks.replicas.compare import judge
from playbooks.replicas.matched import compare, load_bins
from tests.unit.playbooks.replicas.fleet_synth import synthetic_fleet


def _verdicts(obs, min_effect: float = 0.10):
    verdicts, z = judge(obs, min_effect=min_effect, busier_ratio=1.25, alpha=0.05)
    return {v.replica: v for v in verdicts}, z


@pytest.mark.parametrize(("slow", "n", "p", "noise"), [
    (1.15, 300, 1.0, 0.08), (1.3, 120, 2.0, 0.15), (2.0, 60, 1.5, 0.3), (1.5, 200, 1.0, 0.2)])
def test_slower_replica_at_equal_load_is_found(slow: float, n: int, p: float, noise: float) -> None:
    rng = np.random.default_rng(int(slow * 100) + n)
    obs = synthetic_fleet(rng, {"a": (1, 1), "b": (1, 1), "c": (1, slow)}, n=n, p=p, noise=noise,
                          second_noise=0.03)
    by, z = _verdicts(obs)
    assert [r for r, v in by.items() if v.slower] == ["c"]
    assert not any(v.busier for v in by.values())
    tpot = by["c"].comparisons["tpot"]
    lo, hi = tpot.interval(z)
    assert lo <= slow <= hi, (lo, slow, hi)
    assert by["c"].peers == ["a", "b"]


@pytest.mark.parametrize(("load_factor", "p", "a"), [(2.0, 1.5, 0.2), (3.0, 2.0, 0.1), (2.0, 1.0, 0.5)])
def test_busier_replica_on_a_steep_curve_is_busier_not_slower(load_factor: float, p: float, a: float) -> None:
    rng = np.random.default_rng(int(load_factor * 10 + p))
    obs = synthetic_fleet(rng, {"a": (load_factor, 1), "b": (1, 1), "c": (1, 1)}, n=150, p=p, a=a,
                          base_load=2.0, noise=0.1, second_noise=0.03)
    by, _ = _verdicts(obs)
    busy = by["a"]
    # The adversarial part: unmatched, the busy replica looks clearly slower.
    assert busy.comparisons["tpot"].raw_ratio > 1.25
    assert not busy.slower and busy.busier
    assert busy.request_ratio == pytest.approx(load_factor, rel=0.02)
    assert not any(v.slower or v.busier for r, v in by.items() if r != "a")


def test_noise_only_finds_nothing() -> None:
    flagged = 0
    for seed in range(40):
        rng = np.random.default_rng(1000 + seed)
        noise = (0.1, 0.3)[seed % 2]
        obs = synthetic_fleet(rng, {"a": (1, 1), "b": (1, 1), "c": (1, 1), "d": (1, 1)}, n=80 + 5 * seed,
                              p=1.0 + (seed % 3) / 2, noise=noise, second_noise=0.05)
        by, _ = _verdicts(obs)
        flagged += sum(v.slower or v.busier for v in by.values())
    assert flagged == 0


def test_interval_holds_when_requests_share_a_seconds_shock() -> None:
    """Shocks shared by the requests of one replica-second make requests dependent: an i.i.d.
    interval would exclude 'no difference' far more often than it claims. The cluster-robust
    one stays near its level (95% nominal here, no Bonferroni)."""
    excluded = excluded_iid = 0
    trials = 60
    for seed in range(trials):
        rng = np.random.default_rng(5000 + seed)
        obs = synthetic_fleet(rng, {"a": (1, 1), "b": (1, 1)}, n=300, noise=0.02, second_noise=0.15,
                              duration_s=30)
        q = obs.requests
        rep = q["replica"] == "a"
        cl = np.where(rep, 0, 1_000_000) + (q["send_ns"] // 10**9)
        c = compare("tpot", "a", q["tpot_ms"], q["decode_load"], rep, cl)
        excluded += abs(c.delta) > 1.96 * c.se
        iid = compare("tpot", "a", q["tpot_ms"], q["decode_load"], rep, np.arange(len(rep)))
        excluded_iid += abs(iid.delta) > 1.96 * iid.se
    assert excluded <= 0.15 * trials, excluded
    assert excluded_iid >= 0.3 * trials, excluded_iid  # the case the clusters are for


def test_two_slow_replicas_are_both_found_and_healthy_ones_not_flattered() -> None:
    rng = np.random.default_rng(7)
    obs = synthetic_fleet(rng, {"a": (1, 1), "b": (1, 1.4), "c": (1, 1), "d": (1, 1.4)}, n=150, noise=0.15)
    by, z = _verdicts(obs)
    assert sorted(r for r, v in by.items() if v.slower) == ["b", "d"]
    # Second pass: compared with the healthy peers only, each slow one shows its full 1.4x.
    assert by["b"].peers == ["a", "c"]
    assert by["b"].comparisons["tpot"].ratio() == pytest.approx(1.4, rel=0.06)
    assert by["a"].comparisons["tpot"].ratio() == pytest.approx(1.0, abs=0.06)


def test_loads_no_peer_saw_are_not_compared() -> None:
    y = np.r_[np.full(50, 10.0), np.full(50, 30.0)] * np.exp(np.random.default_rng(1).normal(0, 0.05, 100))
    load = np.r_[np.full(50, 2.0), np.full(50, 40.0)]
    rep = np.r_[np.zeros(50, bool), np.ones(50, bool)]
    c = compare("ttft", "x", y, load, rep, np.arange(100))
    assert c.delta is None and c.n_replica == 0 and c.coverage == 0.0
    assert c.load_ratio == pytest.approx(20.0)


def test_load_bins_keep_small_loads_apart_and_group_large_ones() -> None:
    b = load_bins(np.array([1, 2, 3, 4, 200, 205, 0]))
    assert len(set(b[:4].tolist())) == 4
    assert b[4] == b[5] and b[6] == -1


def _with_steps(obs, rng: np.random.Generator, slow_steps: dict[str, float]):
    """Add an engine step log: decode steps whose time grows with the batch, per replica."""
    rows = {k: [] for k in ("replica", "step_id", "step_ms", "decode_seqs", "prefill_tokens", "start_s")}
    for r in obs.replicas:
        n = 600
        batch = rng.integers(1, 12, n)
        rows["replica"] += [r] * n
        rows["step_id"] += list(range(n))
        rows["step_ms"] += (2.0 * (1 + 0.05 * batch) * slow_steps.get(r, 1.0)
                            * np.exp(rng.normal(0, 0.05, n))).tolist()
        rows["decode_seqs"] += batch.tolist()
        rows["prefill_tokens"] += [0] * n
        rows["start_s"] += np.sort(rng.uniform(0, 20, n)).tolist()
    obs.steps = {k: np.asarray(v, dtype=object if k == "replica" else None) for k, v in rows.items()}
    return obs


def test_slower_steps_alone_do_not_make_a_replica_slower_but_corroborate() -> None:
    rng = np.random.default_rng(11)
    # Steps 40% longer on c while its users see nothing (a host stretching the logged steps).
    obs = _with_steps(synthetic_fleet(rng, {"a": (1, 1), "b": (1, 1), "c": (1, 1)}, n=150), rng, {"c": 1.4})
    by, _ = _verdicts(obs)
    assert by["c"].comparisons["step"].ratio() == pytest.approx(1.4, rel=0.05)
    assert not any(v.slower for v in by.values())
    # With its users slower too, the step joins the list of what is slower.
    obs = _with_steps(synthetic_fleet(rng, {"a": (1, 1), "b": (1, 1), "c": (1, 1.4)}, n=150), rng, {"c": 1.4})
    by, _ = _verdicts(obs)
    assert set(by["c"].slower_on) == {"ttft", "tpot", "step"}
