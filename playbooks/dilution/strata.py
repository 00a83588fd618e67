"""Without re-runs: matched strata of requests (`--no-rerun`).

Requests of both runs are put in strata by length buckets (quartiles of the two runs' pooled
input lengths, output lengths and, where both runs have it, prefix shares). The strata both
runs reach are the matched ones (production's requests in a stratum the benchmark never reached
are left out of the split and said). A per-request metric's mean over the benchmark is then moved
to production's mix one property at a time: step k weighs each stratum by production's share
of its first k properties' buckets times the benchmark's share of the rest given them, and
part_k is the change of the mean of the benchmark's per-stratum means from step k-1 to k. The
interaction left over is the gap less the parts: within the matched strata, what production's
requests took beyond the benchmark's of the same lengths (its load, arrivals, sampling,
structured output: the run-level properties only re-runs separate), plus the difference its
requests outside the matched strata make. Order matters, as in any sequential split: the
properties go in the order listed. Run-level metrics (throughput) need re-runs.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from playbooks.dilution.attribution import Z95, Figure
from playbooks.dilution.properties import RunProfile

Draw = tuple[list[float], float, float, float]
STRATIFIED = ("input_lengths", "output_lengths", "prefix_share")
QUARTILES = (0.25, 0.5, 0.75)
RESAMPLES = 200


def _values(p: RunProfile, name: str) -> np.ndarray | None:
    if name == "input_lengths":
        return p.input_tokens
    if name == "output_lengths":
        return p.output_tokens
    return p.shared_share


def _split(bench: np.ndarray, prod: np.ndarray, props: list[tuple[np.ndarray, np.ndarray]],
           mb: np.ndarray, mp: np.ndarray) -> Draw:
    """(parts, gap, within-strata difference, unmatched difference) for row-aligned arrays:
    `bench`/`prod` are each request's stratum code per property (requests x properties)."""
    gap = float(mp.mean() - mb.mean())
    cells_b = {tuple(r) for r in bench.tolist()}
    keep_p = np.array([tuple(r) in cells_b for r in prod.tolist()], dtype=bool)
    if not keep_p.any():
        return [0.0] * len(props), gap, 0.0, gap
    # Every benchmark stratum stays (one production lacks is part of the shift); production's
    # requests in strata the benchmark never reached have no benchmark figure to move to.
    p = prod[keep_p]
    cells = sorted(cells_b)
    index = {c: i for i, c in enumerate(cells)}
    cb = np.array([index[tuple(r)] for r in bench.tolist()])
    cp = np.array([index[tuple(r)] for r in p.tolist()])
    nb = np.bincount(cb, minlength=len(cells)).astype(float)
    npr = np.bincount(cp, minlength=len(cells)).astype(float)
    m_b = np.bincount(cb, weights=mb, minlength=len(cells)) / np.maximum(nb, 1)
    m_p = np.bincount(cp, weights=mp[keep_p], minlength=len(cells)) / np.maximum(npr, 1)
    wb, wp = nb / nb.sum(), npr / npr.sum()
    keys = np.array(cells)
    weights = [wb]
    for k in range(1, len(props) + 1):
        head = [tuple(c[:k]) for c in keys.tolist()]
        marg_p: dict[tuple[int, ...], float] = {}
        marg_b: dict[tuple[int, ...], float] = {}
        for h, x, y in zip(head, wp.tolist(), wb.tolist(), strict=True):
            marg_p[h] = marg_p.get(h, 0.0) + x
            marg_b[h] = marg_b.get(h, 0.0) + y
        weights.append(np.array([marg_p[h] * y / marg_b[h] for h, y in zip(head, wb.tolist(), strict=True)]))
    parts = [float(((weights[k] - weights[k - 1]) * m_b).sum()) for k in range(1, len(props) + 1)]
    within = float((wp * (m_p - m_b)).sum())
    matched_gap = float((wp * m_p).sum() - (wb * m_b).sum())
    return parts, gap, within, gap - matched_gap


def _codes(values: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    cols_b, cols_p = [], []
    for vb, vp in values:
        edges = np.unique(np.quantile(np.concatenate([vb, vp]), QUARTILES))
        cols_b.append(np.searchsorted(edges, vb, side="right"))
        cols_p.append(np.searchsorted(edges, vp, side="right"))
    return np.stack(cols_b, axis=1), np.stack(cols_p, axis=1)


def matched_strata(bench: RunProfile, prod: RunProfile, differing: list[str],
                   metric_b: np.ndarray, metric_p: np.ndarray, seed: int = 0) -> tuple[list[Figure], list[str]]:
    """The figures (gap, parts, interaction and its pieces) of a per-request metric, and the
    properties split (those of `differing` that strata can hold and both runs measured)."""
    props = [p for p in STRATIFIED if p in differing
             and _values(bench, p) is not None and _values(prod, p) is not None]
    values = [(_values(bench, p), _values(prod, p)) for p in props]
    pairs = [(np.asarray(vb), np.asarray(vp)) for vb, vp in values]
    if pairs:
        cb, cp = _codes(pairs)
    else:
        cb, cp = np.zeros((bench.requests, 1), int), np.zeros((prod.requests, 1), int)
    fb, fp = np.isfinite(metric_b), np.isfinite(metric_p)  # TPOT: none for a one-token reply
    cb, cp, metric_b, metric_p = cb[fb], cp[fp], metric_b[fb], metric_p[fp]
    if not len(metric_b) or not len(metric_p):
        raise ValueError("--no-rerun: a run has no request this metric is defined for")
    parts, gap, within, unmatched = _split(cb, cp, pairs, metric_b, metric_p)
    rng = np.random.default_rng(seed)
    draws = []
    for _ in range(RESAMPLES):
        ib = rng.integers(0, len(metric_b), len(metric_b))
        ip = rng.integers(0, len(metric_p), len(metric_p))
        draws.append(_split(cb[ib], cp[ip], pairs, metric_b[ib], metric_p[ip]))

    def spread(pick: Callable[[Draw], float]) -> float:
        return float(Z95 * np.array([pick(d) for d in draws]).std(ddof=1))

    out = [Figure("gap", "gap", gap, spread(lambda d: d[1]))]
    def part(i: int) -> Callable[[Draw], float]:
        return lambda d: d[0][i]

    out += [Figure(p, "part", parts[i], spread(part(i))) for i, p in enumerate(props)]
    out.append(Figure("interaction", "interaction", gap - float(np.sum(parts)),
                      spread(lambda d: d[1] - float(np.sum(d[0])))))
    out.append(Figure("within_strata", "detail", within, spread(lambda d: d[2])))
    out.append(Figure("unmatched", "detail", unmatched, spread(lambda d: d[3])))
    return out, props
