"""The gap split into one part per swapped property and an interaction term left over.

Every row is a linear combination of measured values: the stored benchmark and production
runs (`BENCH`, `PROD`) and the re-runs, keyed by the set of properties each swapped in. So a
row's uncertainty follows from each value's variance (independent runs), and the rows sum to
the gap by construction:

- `one-at-a-time`: part_k = v({k}) - v({}), each property's effect measured from the
  benchmark's side;
- `shapley`: part_k = the Shapley value of k over every subset (weights |S|!(K-|S|-1)!/K!),
  which sums to v(all) - v({}) with nothing left between the swaps;
- interaction = gap - sum(parts), exactly; it holds three measured pieces, shown beneath it:
  `swap_interaction` = v(all) - v({}) - sum(parts) (the properties' joint effect beyond their
  separate ones; 0 under Shapley), `baseline_drift` = v({}) - BENCH (the target now, and the
  replay, against the stored benchmark) and `not_reproduced` = PROD - v(all) (what swapping
  every measured property still leaves: a property the store does not record, another target).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import combinations

BENCH = "bench"
PROD = "prod"
Key = frozenset[str] | str
Z95 = 1.959964


@dataclass(frozen=True)
class Row:
    name: str
    kind: str                     # gap | part | interaction | detail
    weights: dict[Key, float]     # value key -> coefficient


def _add(*terms: tuple[float, dict[Key, float]]) -> dict[Key, float]:
    out: dict[Key, float] = {}
    for scale, weights in terms:
        for k, w in weights.items():
            out[k] = out.get(k, 0.0) + scale * w
    return {k: w for k, w in out.items() if abs(w) > 1e-12}


def part_weights(differing: tuple[str, ...], method: str) -> dict[str, dict[Key, float]]:
    """Each property's part as weights over the re-runs' values."""
    empty: frozenset[str] = frozenset()
    if method == "one-at-a-time":
        return {p: {frozenset([p]): 1.0, empty: -1.0} for p in differing}
    if method != "shapley":
        raise ValueError(f"attribution: {method!r} is not one-at-a-time or shapley")
    k_all = len(differing)
    out: dict[str, dict[Key, float]] = {}
    for p in differing:
        others = [q for q in differing if q != p]
        terms: list[tuple[float, dict[Key, float]]] = []
        for size in range(len(others) + 1):
            w = math.factorial(size) * math.factorial(k_all - size - 1) / math.factorial(k_all)
            for subset in combinations(others, size):
                s = frozenset(subset)
                terms.append((w, {s | {p}: 1.0, s: -1.0}))
        out[p] = _add(*terms)
    return out


def rows(differing: tuple[str, ...], method: str) -> list[Row]:
    """gap, the parts, the interaction and its three pieces, in that order."""
    empty: frozenset[str] = frozenset()
    full = frozenset(differing)
    gap: dict[Key, float] = {PROD: 1.0, BENCH: -1.0}
    parts = part_weights(differing, method)
    summed = _add(*((1.0, w) for w in parts.values()))
    out = [Row("gap", "gap", gap)]
    out += [Row(p, "part", parts[p]) for p in differing]
    out.append(Row("interaction", "interaction", _add((1.0, gap), (-1.0, summed))))
    out.append(Row("swap_interaction", "detail", _add((1.0, {full: 1.0, empty: -1.0}), (-1.0, summed))))
    out.append(Row("baseline_drift", "detail", {empty: 1.0, BENCH: -1.0}))
    out.append(Row("not_reproduced", "detail", {PROD: 1.0, full: -1.0}))
    return out


@dataclass(frozen=True)
class Figure:
    name: str
    kind: str
    value: float
    uncertainty: float   # half-width of a 95% interval


def evaluate(table: list[Row], values: dict[Key, float], variances: dict[Key, float]) -> list[Figure]:
    """Each row's value and 95% half-width. The interaction is computed as the gap less the
    sum of the parts, so the parts and it add up to the gap to the last bit of rounding."""
    for r in table:
        missing = [k for k in r.weights if k not in values]
        if missing:
            raise ValueError(f"attribution: no measured value for {missing[0]!r}")
    out = []
    parts_sum = math.fsum(sum(w * values[k] for k, w in r.weights.items())
                          for r in table if r.kind == "part")
    gap = sum(w * values[k] for k, w in table[0].weights.items())
    for r in table:
        value = gap - parts_sum if r.kind == "interaction" else math.fsum(
            w * values[k] for k, w in r.weights.items())
        var = sum(w * w * variances.get(k, 0.0) for k, w in r.weights.items())
        out.append(Figure(r.name, r.kind, value, Z95 * math.sqrt(max(var, 0.0))))
    return out
