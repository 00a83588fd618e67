"""The attribution arithmetic: parts and the interaction left over sum to the gap, whatever the
values; one-at-a-time parts are the single swaps' effects; Shapley parts split a known game's
interaction evenly and leave no swap interaction; uncertainties follow the weights."""

from __future__ import annotations

import itertools
import math

import pytest

from playbooks.dilution.attribution import BENCH, PROD, Z95, evaluate, part_weights, rows

PROPS = ("input_lengths", "prefix_share", "arrivals")


def _game(props: tuple[str, ...], effects: dict[str, float], pair: float, base: float) -> dict:
    """v(S) = base + the effects in S + `pair` when the first two properties are both in S."""
    out = {}
    for k in range(len(props) + 1):
        for subset in itertools.combinations(props, k):
            s = frozenset(subset)
            out[s] = base + sum(effects[p] for p in s) + (pair if len(props) > 1 and set(props[:2]) <= s else 0.0)
    return out


def _by_name(figs):
    return {f.name: f for f in figs}


@pytest.mark.parametrize("props, effects, pair, drift, unreproduced", [
    (PROPS[:1], {"input_lengths": -310.0}, 0.0, 4.5, -2.0),
    (PROPS[:2], {"input_lengths": -120.0, "prefix_share": -45.5}, -30.0, -7.0, 11.0),
    (PROPS, {"input_lengths": 0.8, "prefix_share": 0.05, "arrivals": 2.75}, 0.4, 0.01, -0.3),
])
def test_one_at_a_time_parts_are_single_swaps_and_sum_to_the_gap(props, effects, pair, drift, unreproduced) -> None:
    base = 900.0
    values = _game(props, effects, pair, base)
    values[BENCH] = base - drift
    values[PROD] = values[frozenset(props)] + unreproduced
    figs = _by_name(evaluate(rows(props, "one-at-a-time"), values, {}))
    gap = values[PROD] - values[BENCH]
    assert figs["gap"].value == pytest.approx(gap)
    for p in props:
        assert figs[p].value == pytest.approx(effects[p])
    parts = [figs[p].value for p in props]
    assert math.fsum(parts) + figs["interaction"].value == pytest.approx(gap, abs=1e-9 * max(1.0, abs(gap)))
    assert figs["swap_interaction"].value == pytest.approx(pair if len(props) > 1 else 0.0, abs=1e-9)
    assert figs["baseline_drift"].value == pytest.approx(drift)
    assert figs["not_reproduced"].value == pytest.approx(unreproduced)
    details = sum(figs[n].value for n in ("swap_interaction", "baseline_drift", "not_reproduced"))
    assert details == pytest.approx(figs["interaction"].value, abs=1e-9)


@pytest.mark.parametrize("effects, pair", [
    ({"input_lengths": -120.0, "prefix_share": -40.0, "arrivals": 0.0}, -30.0),
    ({"input_lengths": 3.0, "prefix_share": 9.0, "arrivals": -1.5}, 12.0),
])
def test_shapley_splits_a_pair_interaction_evenly_and_sums_to_the_full_swap(effects, pair) -> None:
    values = _game(PROPS, effects, pair, 50.0)
    values[BENCH], values[PROD] = 50.0, values[frozenset(PROPS)]
    figs = _by_name(evaluate(rows(PROPS, "shapley"), values, {}))
    assert figs["input_lengths"].value == pytest.approx(effects["input_lengths"] + pair / 2)
    assert figs["prefix_share"].value == pytest.approx(effects["prefix_share"] + pair / 2)
    assert figs["arrivals"].value == pytest.approx(effects["arrivals"])
    assert figs["swap_interaction"].value == pytest.approx(0.0, abs=1e-9)
    assert figs["interaction"].value == pytest.approx(0.0, abs=1e-9)


def test_shapley_weights_of_two_properties() -> None:
    w = part_weights(("a", "b"), "shapley")
    empty, a, b, ab = frozenset(), frozenset("a"), frozenset("b"), frozenset("ab")
    assert w["a"] == pytest.approx({a: 0.5, empty: -0.5, ab: 0.5, b: -0.5})


@pytest.mark.parametrize("var_base, var_swap, var_bench, var_prod", [(4.0, 9.0, 1.0, 2.0), (0.25, 0.0, 3.0, 0.5)])
def test_uncertainty_follows_the_weights(var_base, var_swap, var_bench, var_prod) -> None:
    props = ("input_lengths",)
    empty, one = frozenset(), frozenset(props)
    values = {empty: 10.0, one: 20.0, BENCH: 9.0, PROD: 21.0}
    variances = {empty: var_base, one: var_swap, BENCH: var_bench, PROD: var_prod}
    figs = _by_name(evaluate(rows(props, "one-at-a-time"), values, variances))
    assert figs["input_lengths"].uncertainty == pytest.approx(Z95 * math.sqrt(var_base + var_swap))
    assert figs["gap"].uncertainty == pytest.approx(Z95 * math.sqrt(var_bench + var_prod))
    # interaction = prod - bench - (one - empty): all four values once
    assert figs["interaction"].uncertainty == pytest.approx(
        Z95 * math.sqrt(var_base + var_swap + var_bench + var_prod))


def test_bad_method_and_missing_value_are_refused() -> None:
    with pytest.raises(ValueError, match="attribution"):
        rows(PROPS, "banzhaf")
    values = {frozenset(): 1.0, BENCH: 1.0, PROD: 2.0}
    with pytest.raises(ValueError, match="no measured value"):
        evaluate(rows(("arrivals",), "one-at-a-time"), values, {})
