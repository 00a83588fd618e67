"""The slow-link statistics: paired comparison, rank bisection, pair matrix, on modelled
noisy measurements (the real ranks are in tests/e2e/test_probe_links.py)."""

from __future__ import annotations

import numpy as np
import pytest

from probes.links.bisect import bisect_ranks
from probes.links.pairwise import all_pairs, analyse_pairs
from probes.links.stats import compare, median_interval


def _measure(rng: np.random.Generator, slow: int | None, factor: float, noise: float,
             peer: int | None = None, calls: list[tuple[int, tuple[int, ...]]] | None = None):
    def measure(step, groups, first, reps):
        out = []
        for g in groups:
            if calls is not None:
                calls.append((step, g))
            hit = slow in g and (peer is None or peer in g)
            out.append(list((factor if hit else 1.0) * np.exp(rng.normal(0, noise, reps))))
        return out
    return measure


def test_median_interval_widens_to_the_range_for_few_repeats() -> None:
    assert median_interval(np.arange(1, 6)) == (1, 5)
    assert median_interval(np.arange(1, 16)) == (4, 12)


def test_compare_needs_the_interval_not_just_the_median() -> None:
    assert compare(np.array([3.0, 3.1, 2.9, 3.2, 3.0]), np.ones(5), 1.5).verdict == "a_slower"
    assert compare(np.ones(5), np.array([3.0, 3.1, 2.9, 3.2, 3.0]), 1.5).verdict == "b_slower"
    # median 3x but one repeat at 1.0: over 5 repeats the interval is the range -> unclear
    assert compare(np.array([3.0, 3.1, 1.0, 3.2, 3.0]), np.ones(5), 1.5).verdict == "unclear"
    assert compare(np.array([1.0, 1.1, 0.95, 1.05, 1.0]), np.ones(5), 1.5).verdict == "same"
    # 1.3x sits in the grey band: neither slow nor the same
    assert compare(np.full(9, 1.3), np.ones(9), 1.5).verdict == "unclear"


@pytest.mark.parametrize(("n", "slow", "factor"), [(4, 0, 3.0), (4, 3, 2.0), (5, 4, 2.5), (5, 1, 4.0),
                                                   (6, 2, 2.0), (8, 5, 3.0), (8, 7, 1.8)])
def test_bisection_names_the_slow_rank_in_log_steps(n: int, slow: int, factor: float) -> None:
    rng = np.random.default_rng(n * 10 + slow)
    calls: list[tuple[int, tuple[int, ...]]] = []
    v = bisect_ranks(n, _measure(rng, slow, factor, 0.1, calls=calls), threshold=1.5)
    assert (v.status, v.rank) == ("slow_rank", slow), v.message
    assert len(v.steps) <= int(np.ceil(np.log2(n))) + 1
    for s in v.steps:  # both sides of a step always have the same size
        assert len(s.a) == len(s.b) >= 2


@pytest.mark.parametrize("n", [4, 5, 8])
def test_bisection_names_no_rank_when_none_is_slow(n: int) -> None:
    v = bisect_ranks(n, _measure(np.random.default_rng(n), None, 1.0, 0.1), threshold=1.5)
    assert v.status == "no_slow_rank" and v.rank is None


def test_a_slow_link_between_two_ranks_is_not_blamed_on_one() -> None:
    # link 0-1 slow: {0,1} is slower than {2,3}, but {0,2} and {1,2} measure the same
    v = bisect_ranks(4, _measure(np.random.default_rng(3), 0, 3.0, 0.05, peer=1), threshold=1.5)
    assert v.status == "not_single_rank" and v.rank is None and set(v.candidates) == {0, 1}


def test_heavy_noise_gives_cannot_tell_or_the_right_rank_never_a_wrong_one() -> None:
    rng = np.random.default_rng(7)
    outcomes = set()
    for trial in range(40):
        slow = trial % 4
        v = bisect_ranks(4, _measure(rng, slow, 2.0, 0.45), threshold=1.5)
        assert v.rank in (None, slow), v.message
        outcomes.add(v.status)
    assert "slow_rank" in outcomes


def test_too_few_ranks_to_bisect_says_so() -> None:
    v = bisect_ranks(3, _measure(np.random.default_rng(0), 1, 3.0, 0.1))
    assert v.status == "cannot_tell" and "--pairwise" in v.message


def _pair_times(n: int, slow_pair, factor: float, noise: float, reps: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.array([[(factor if slow_pair(p) else 1.0) * np.exp(rng.normal(0, noise)) for _ in range(reps)]
                     for p in all_pairs(n)])


@pytest.mark.parametrize(("n", "slow", "factor"), [(3, 2, 3.0), (4, 1, 2.5), (4, 3, 4.0), (6, 0, 2.0)])
def test_pair_matrix_names_the_rank_and_all_its_pairs(n: int, slow: int, factor: float) -> None:
    t = _pair_times(n, lambda p: slow in p, factor, 0.1, 9, n + slow)
    v = analyse_pairs(n, all_pairs(n), t)
    assert (v.status, v.rank) == ("slow_rank", slow), v.message
    assert set(v.slow_pairs) == {p for p in all_pairs(n) if slow in p}


@pytest.mark.parametrize(("n", "pair"), [(4, (1, 3)), (5, (0, 4))])
def test_pair_matrix_names_a_single_slow_link(n: int, pair: tuple[int, int]) -> None:
    v = analyse_pairs(n, all_pairs(n), _pair_times(n, lambda p: p == pair, 3.0, 0.1, 9, 1))
    assert v.status == "slow_pairs" and v.rank is None and v.slow_pairs == [pair]


def test_pair_matrix_with_nothing_slow_and_with_two_ranks() -> None:
    v = analyse_pairs(4, all_pairs(4), _pair_times(4, lambda p: False, 1.0, 0.05, 9, 2))
    assert v.status == "no_slow_pair" and not v.slow_pairs
    v = analyse_pairs(2, all_pairs(2), np.ones((1, 5)))
    assert v.status == "cannot_tell"


def test_a_burst_on_one_ranks_pairs_in_one_repeat_is_not_a_slow_rank() -> None:
    rng = np.random.default_rng(11)
    pairs = all_pairs(4)
    t = np.exp(rng.normal(0, 0.05, (len(pairs), 5)))
    for k, p in enumerate(pairs):
        if 0 in p:
            t[k, 2] *= 5.0  # a neighbour's burst while rank 0's pairs were measured
    v = analyse_pairs(4, pairs, t)
    assert v.rank is None and v.slow_pairs == [], v.message


def test_pair_levels_are_deterministic_so_every_rank_decides_alike() -> None:
    t = _pair_times(4, lambda p: 2 in p, 2.0, 0.3, 5, 9)
    assert analyse_pairs(4, all_pairs(4), t).as_dict() == analyse_pairs(4, all_pairs(4), t.copy()).as_dict()
