"""The resampling statistics agree with a brute-force bootstrap drawn from the same
resamples, and the overlap factor measures what requests in flight together share."""

from __future__ import annotations

import numpy as np
import pytest

from infbench.gate.stats import (
    Clustered,
    Mean,
    Quantile,
    Rate,
    overlap_factor,
    parse_statistic,
    replicates,
    resample_counts,
    widen,
)


def _draws(n: int, b: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    idx = np.random.default_rng(seed).integers(0, n, (b, n))
    counts = np.stack([np.bincount(r, minlength=n) for r in idx]).astype(float)
    return idx, counts


@pytest.mark.parametrize("q", [0.5, 0.9, 0.99, 0.013])
def test_quantile_from_counts_is_numpys_quantile_of_the_resample(q: float) -> None:
    rng = np.random.default_rng(1)
    for x in (rng.lognormal(0, 1, 501), np.round(rng.lognormal(0, 1, 300))):  # ties too
        idx, counts = _draws(x.size, 200, 2)
        assert Quantile(x, q).replicates(counts) == pytest.approx(np.quantile(x[idx], q, axis=1), abs=1e-12)


def test_mean_and_rate_from_counts_are_exact() -> None:
    rng = np.random.default_rng(3)
    tok, busy = rng.integers(1, 500, 400).astype(float), rng.lognormal(0, 0.5, 400)
    idx, counts = _draws(400, 100, 4)
    assert Mean(busy).replicates(counts) == pytest.approx(busy[idx].mean(axis=1))
    rate = Rate(tok, busy, 16.0)
    assert rate.replicates(counts) == pytest.approx(16.0 * tok[idx].sum(1) / busy[idx].sum(1))
    assert rate.value() == pytest.approx(16.0 * tok.sum() / busy.sum())


def test_quantile_alone_matches_a_brute_force_bootstrap_in_distribution() -> None:
    rng = np.random.default_rng(5)
    x = rng.lognormal(0, 0.5, 2000)
    fast = Quantile(x, 0.9).alone(4000, rng)
    brute = np.quantile(x[rng.integers(0, x.size, (4000, x.size))], 0.9, axis=1)
    assert fast.mean() == pytest.approx(brute.mean(), rel=0.01)
    assert fast.std() == pytest.approx(brute.std(), rel=0.1)


def test_paired_statistics_share_their_resamples() -> None:
    rng = np.random.default_rng(6)
    x = rng.lognormal(0, 1, 500)  # a wide length mix
    y = x * rng.lognormal(0, 0.02, 500)  # the same requests, 2% noise each
    rb, rc = replicates([Mean(x), Mean(y)], 1000, rng)
    paired = np.std(np.log(rc / rb))
    unpaired = np.std(np.log(Mean(y).alone(1000, rng) / Mean(x).alone(1000, rng)))
    assert paired < unpaired / 10
    with pytest.raises(ValueError, match="same units"):
        replicates([Mean(x), Mean(y[:10])], 10, rng)


def test_cluster_bootstrap_is_wider_than_treating_gaps_as_independent() -> None:
    rng = np.random.default_rng(2)
    per_request = rng.lognormal(0, 0.3, 300)  # each request has its own speed
    values = np.repeat(per_request, 50) * rng.lognormal(0, 0.05, 300 * 50)
    owner = np.repeat(np.arange(300), 50)
    clustered = Clustered(values, owner, 300, 0.5).alone(2000, rng)
    naive = Quantile(values, 0.5).alone(2000, rng)
    assert clustered.std() > 3 * naive.std()
    brute = [np.quantile(values.reshape(300, 50)[rng.integers(0, 300, 300)], 0.5) for _ in range(500)]
    assert clustered.std() == pytest.approx(np.std(brute), rel=0.15)
    mean = Clustered(values, owner, 300, None)
    assert mean.value() == pytest.approx(values.mean())


def test_resample_counts_draw_n_units_each() -> None:
    chunks = list(resample_counts(50, 300, np.random.default_rng(0)))
    counts = np.concatenate(chunks)
    assert counts.shape == (300, 50) and (counts.sum(axis=1) == 50).all()
    assert counts.mean() == pytest.approx(1.0)


def test_overlap_factor() -> None:
    rng = np.random.default_rng(7)
    n = 4000
    start = np.arange(n, dtype=float)
    # requests one after another: nothing shared, nothing to widen
    apart = overlap_factor(rng.normal(size=n), start, start + 0.5)
    assert apart == 1.0
    # groups of 8 in flight together, each group slowed alike: variance of a sum 8x larger
    shared = np.repeat(rng.normal(size=n // 8), 8)
    group_start = np.repeat(np.arange(n // 8, dtype=float), 8)
    assert overlap_factor(shared, group_start, group_start + 0.9) == pytest.approx(8.0, rel=0.15)
    # in flight together but independent: about 1 (never below)
    assert overlap_factor(rng.normal(size=n), group_start, group_start + 0.9) == pytest.approx(1.0, abs=0.3)
    # alternating influence among overlapping requests reads as negative: clipped to 1
    assert overlap_factor(np.tile([1.0, -1.0], n // 2), group_start, group_start + 0.9) == 1.0


def test_widen_scales_the_variance() -> None:
    reps = np.random.default_rng(8).lognormal(0, 0.1, 5000)
    assert np.var(np.log(widen(reps, 4.0, log=True))) == pytest.approx(4 * np.var(np.log(reps)), rel=0.01)
    assert np.var(widen(reps - 1.0, 9.0, log=False)) == pytest.approx(9 * np.var(reps), rel=0.01)
    assert widen(reps, 1.0, log=True) is reps


def test_statistic_names() -> None:
    assert parse_statistic("p99.9") == pytest.approx(0.999)
    assert parse_statistic("median") == 0.5 and parse_statistic("mean") is None
    with pytest.raises(ValueError, match="p100"):
        parse_statistic("p100")
