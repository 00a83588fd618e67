"""Rank shifts: exact against brute force on small samples, a known shift is recovered,
and the overlap of requests in flight together widens the interval."""

from __future__ import annotations

import numpy as np
import pytest

from infbench.gate.rank import overlapping_shift, rank_shift, signed_rank_shift


def test_hodges_lehmann_estimates_match_brute_force() -> None:
    rng = np.random.default_rng(1)
    x, y = rng.normal(0, 1, 41), rng.normal(0.3, 1, 37)
    assert rank_shift(x, y, 0.95).shift == pytest.approx(np.median(np.subtract.outer(y, x)), abs=1e-9)
    d = rng.standard_t(3, 51)
    walsh = (d[:, None] + d[None, :])[np.triu_indices(d.size)] / 2.0
    assert signed_rank_shift(d, 0.95).shift == pytest.approx(np.median(walsh), abs=1e-9)


def test_rank_shift_recovers_a_known_shift() -> None:
    rng = np.random.default_rng(3)
    a = rng.normal(0, 1, 3000)
    r = rank_shift(a, rng.normal(0.2, 1, 3000), 0.95)
    assert r.ci[0] < 0.2 < r.ci[1] and r.p_value < 1e-6
    same = rank_shift(a, rng.normal(0, 1, 3000), 0.95)
    assert same.ci[0] < 0 < same.ci[1] and same.p_value > 0.001


def test_signed_rank_interval_covers_the_shift_at_its_level() -> None:
    rng = np.random.default_rng(4)
    covered = 0
    for _ in range(200):
        d = 0.05 + rng.standard_t(4, 200) * 0.02  # heavy-tailed per-request changes
        lo, hi = signed_rank_shift(d, 0.9).ci
        covered += lo <= 0.05 <= hi
    assert 0.84 <= covered / 200 <= 0.96


def test_identical_samples_have_no_shift() -> None:
    x = np.random.default_rng(5).lognormal(0, 1, 300)
    r = signed_rank_shift(x - x, 0.95)
    assert r.shift == 0.0 and r.ci == (0.0, 0.0) and r.p_value == 1.0


def test_overlap_widens_paired_and_unpaired_intervals() -> None:
    rng = np.random.default_rng(6)
    n = 1200
    group = np.repeat(np.arange(n // 12, dtype=float), 12)
    times = (group, group + 0.9)  # 12 requests in flight together
    apart = (np.arange(n, dtype=float), np.arange(n, dtype=float) + 0.5)
    x = rng.lognormal(0, 0.5, n)
    # paired: the candidate's change is shared by requests in flight together (a slow step)
    y = x * np.repeat(rng.lognormal(0, 0.05, n // 12), 12)
    # unpaired: the candidate's values themselves move together in groups
    y2 = np.repeat(rng.lognormal(0, 0.5, n // 12), 12) * rng.lognormal(0, 0.01, n)
    for paired, cand in ((True, y), (False, y2)):
        together = overlapping_shift(x, cand, 0.95, paired=paired, base_times=times, cand_times=times)
        alone = overlapping_shift(x, cand, 0.95, paired=paired, base_times=apart, cand_times=apart)
        assert together.shift == alone.shift
        assert together.ci[1] - together.ci[0] > 1.5 * (alone.ci[1] - alone.ci[0]), paired
        assert together.p_value >= alone.p_value
    # a change private to each request is not widened just because requests overlapped
    own = x * rng.lognormal(0, 0.05, n)
    together = overlapping_shift(x, own, 0.95, paired=True, base_times=times, cand_times=times)
    alone = overlapping_shift(x, own, 0.95, paired=True, base_times=apart, cand_times=apart)
    assert together.ci[1] - together.ci[0] < 1.3 * (alone.ci[1] - alone.ci[0])
