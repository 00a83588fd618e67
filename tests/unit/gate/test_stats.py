"""The resampling estimators agree with brute-force bootstrap and rank statistics."""

from __future__ import annotations

import numpy as np
import pytest

from infbench.gate.stats import (
    Clustered,
    clustered_replicates,
    parse_statistic,
    quantile_replicates,
    rank_shift,
    t_quantile,
)


def test_quantile_replicates_match_brute_force_bootstrap() -> None:
    rng = np.random.default_rng(1)
    x = rng.lognormal(0, 0.5, 2000)
    fast = quantile_replicates(x, 0.9, 4000, rng)
    idx = rng.integers(0, x.size, (4000, x.size))
    brute = np.quantile(x[idx], 0.9, axis=1)
    assert fast.mean() == pytest.approx(brute.mean(), rel=0.01)
    assert fast.std() == pytest.approx(brute.std(), rel=0.1)


def test_cluster_bootstrap_is_wider_than_treating_gaps_as_independent() -> None:
    rng = np.random.default_rng(2)
    per_request = rng.lognormal(0, 0.3, 300)  # each request has its own speed
    values = np.repeat(per_request, 50) * rng.lognormal(0, 0.05, 300 * 50)
    owner = np.repeat(np.arange(300), 50)
    clustered = clustered_replicates(Clustered(values, owner, 300), 0.5, 2000, rng)
    naive = quantile_replicates(values, 0.5, 2000, rng)
    assert clustered.std() > 3 * naive.std()
    brute = [np.quantile(values.reshape(300, 50)[rng.integers(0, 300, 300)], 0.5) for _ in range(500)]
    assert clustered.std() == pytest.approx(np.std(brute), rel=0.15)


def test_rank_shift_recovers_a_known_shift() -> None:
    rng = np.random.default_rng(3)
    a = rng.normal(0, 1, 3000)
    r = rank_shift(a, rng.normal(0.2, 1, 3000), 0.95)
    assert r.ci[0] < 0.2 < r.ci[1] and r.p_value < 1e-6
    same = rank_shift(a, rng.normal(0, 1, 3000), 0.95)
    assert same.ci[0] < 0 < same.ci[1] and same.p_value > 0.001


def test_statistic_names() -> None:
    assert parse_statistic("p99.9") == pytest.approx(0.999)
    assert parse_statistic("median") == 0.5 and parse_statistic("mean") is None
    with pytest.raises(ValueError, match="p100"):
        parse_statistic("p100")


def test_t_quantile_close_to_tables() -> None:
    assert t_quantile(0.975, 5) == pytest.approx(2.571, abs=0.02)
    assert t_quantile(0.975, 30) == pytest.approx(2.042, abs=0.002)
