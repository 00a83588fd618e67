"""HTA's timeline analyses over `TimelineArrays`, in numpy: the twin of `timeline_sql`.

Pure functions, one per analysis, each returning (columns, rows) with the same columns, rows
and order as the SQL of the same name, so an in-memory trace (`TraceFrame`) and an imported
one give the same numbers; tests/unit/probes/test_trace_frame.py holds them to that on the
real fixtures and on generated traces. The definitions, and why they are HTA's, are in
`timeline_sql`'s docstring; only what numpy needs spelled out differently is said here.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from probes.traces.timeline_arrays import KTYPES, TimelineArrays

Rows = tuple[list[str], list[tuple[Any, ...]]]
_CATEGORIES = ("host_wait", "kernel_wait", "other")


def _round(x: float, digits: int) -> float:
    # DuckDB's round: half away from zero (numpy's rounds half to even)
    if not math.isfinite(x):
        return x
    f = 10.0 ** digits
    return math.copysign(math.floor(abs(x) * f + 0.5), x) / f


def _pct(part: float, whole: float, digits: int = 2) -> float:
    # DuckDB's double division: x/0 is inf (nan for 0/0), not an error
    if whole == 0:
        return math.nan if part == 0 else math.copysign(math.inf, part)
    return _round(100 * part / whole, digits)


def _quantile(sorted_x: np.ndarray, q: float) -> float:
    """quantile_cont: linear between the two nearest ranks (numpy's default method, without
    its per-call setup, which costs more than these small groups)."""
    pos = (len(sorted_x) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_x) - 1)
    return float(sorted_x[lo] + (sorted_x[hi] - sorted_x[lo]) * (pos - lo))


def _std(x: np.ndarray) -> float:
    """Sample standard deviation (n > 1)."""
    return math.sqrt(float(((x - x.mean()) ** 2).sum()) / (len(x) - 1))


def _spans(starts: np.ndarray, n: int) -> list[tuple[int, int]]:
    """(start, end) of each run from `_starts`; none for no rows (a rank without kernels: a
    trace of syncs and CPU ops only), not one empty run."""
    return list(zip(starts.tolist(), [*starts[1:].tolist(), n], strict=True)) if len(starts) else []


def _starts(*keys: np.ndarray) -> np.ndarray:
    """Indices where a run of equal keys begins, in arrays already sorted by them."""
    n = len(keys[0])
    if not n:
        return np.zeros(0, dtype=np.int64)
    change = np.zeros(n, dtype=bool)
    change[0] = True
    for k in keys:
        change[1:] |= k[1:] != k[:-1]
    return np.flatnonzero(change)


def merge(part: np.ndarray, ts: np.ndarray, e: np.ndarray, tie: np.ndarray,
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """HTA's merge_kernel_intervals per partition: sorted by (ts, e, tie), an interval opens
    a new group when it starts after every earlier one has ended; a group is [min ts, max e].
    Returns (part, ts, e) of the groups, sorted by partition then time."""
    if not len(ts):
        return part[:0], ts[:0], e[:0]
    o = np.lexsort((tie, e, ts, part))
    p, s, en = part[o], ts[o], e[o]
    bounds = _starts(p)
    prev = np.empty(len(s))
    for a, b in zip(bounds, [*bounds[1:], len(s)], strict=True):
        prev[a] = -np.inf
        prev[a + 1:b] = np.maximum.accumulate(en[a:b])[:-1]
    groups = np.flatnonzero(s > prev)
    return p[groups], s[groups], np.maximum.reduceat(en, groups)


def _merged(tl: TimelineArrays, mask: np.ndarray, bit: np.ndarray | None = None):
    part = tl.rank[mask] * 8 + (bit[mask] if bit is not None else 0)
    return merge(part, tl.ts[mask], tl.e[mask], tl.event_id[mask])


def _per_part_sum(part: np.ndarray, x: np.ndarray) -> dict[int, float]:
    b = _starts(part)
    return dict(zip(part[b].tolist(), np.add.reduceat(x, b).tolist(), strict=True)) if len(b) else {}


def temporal(tl: TimelineArrays) -> Rows:
    p, s, e = _merged(tl, np.ones(len(tl), dtype=bool))
    cp, cs, ce = _merged(tl, tl.ktype == 0)
    compute = {k // 8: v for k, v in _per_part_sum(cp, ce - cs).items()}
    rows = []
    b = _starts(p)
    for a, z in _spans(b, len(p)):
        rank = int(p[a] // 8)
        kt = float(e[z - 1] - s[a])
        busy = float(np.sum(e[a:z] - s[a:z]))
        comp = compute.get(rank, 0.0)
        idle = kt - busy
        rows.append((rank, idle, comp, kt - comp - idle, kt, _pct(idle, kt), _pct(comp, kt),
                     _pct(busy - comp, kt)))
    return (["rank", "idle_time_us", "compute_time_us", "non_compute_time_us", "kernel_time_us",
             "idle_time_pctg", "compute_time_pctg", "non_compute_time_pctg"], rows)


def idle_gaps(tl: TimelineArrays, delay: float = 30) -> tuple[np.ndarray, ...]:
    """(rank, stream, interval, category index) of each kernel/memcpy/memset: the gap before
    it on its stream (NaN for a stream's first) and its cause."""
    m = tl.kind <= 2  # kernel, memcpy, memset (KINDS' first three)
    rank, stream, ts, e, eid, lts = (x[m] for x in (tl.rank, tl.stream, tl.ts, tl.e,
                                                     tl.event_id, tl.launch_ts))
    o = np.lexsort((eid, ts, stream, rank))
    rank, stream, ts, e, lts = rank[o], stream[o], ts[o], e[o], lts[o]
    prev = np.empty(len(ts))
    if len(ts):
        prev[1:] = e[:-1]
        prev[_starts(rank, stream)] = np.nan
    with np.errstate(invalid="ignore"):
        gap = ts - prev
        cat = np.where(lts > prev, 0, np.where(gap < delay, 1, 2))
    return rank, stream, gap, cat


def _groups(rank: np.ndarray, stream: np.ndarray, cat: np.ndarray):
    o = np.lexsort((cat, stream, rank))
    b = _starts(rank[o], stream[o], cat[o])
    return o, b, [z for _, z in _spans(b, len(o))]


def idle(tl: TimelineArrays, delay: float = 30) -> Rows:
    rank, stream, gap, cat = idle_gaps(tl, delay)
    o, b, ends = _groups(rank, stream, cat)
    per = [(int(rank[o[a]]), int(stream[o[a]]), int(cat[o[a]]), float(np.nansum(gap[o[a:z]])))
           for a, z in zip(b, ends, strict=True)]
    totals: dict[tuple[int, int], float] = {}
    for r, s, _, t in per:
        totals[(r, s)] = totals.get((r, s), 0.0) + t
    rows = []
    for r, s, c, t in per:
        tot = totals[(r, s)]
        rows.append((r, s, _CATEGORIES[c], t, t / tot if tot else math.nan))
    return ["rank", "stream", "idle_category", "idle_time", "idle_time_ratio"], rows


def idle_stats(tl: TimelineArrays, delay: float = 30) -> Rows:
    rank, stream, gap, cat = idle_gaps(tl, delay)
    o, b, ends = _groups(rank, stream, cat)
    rows: list[tuple[Any, ...]] = []
    for a, z in zip(b, ends, strict=True):
        x = gap[o[a:z]]
        x = x[~np.isnan(x)]
        n = len(x)
        head = (int(rank[o[a]]), int(stream[o[a]]), _CATEGORIES[int(cat[o[a]])], n)
        if not n:
            rows.append((*head, *([None] * 7)))
            continue
        x = np.sort(x)
        rows.append((*head, float(x.mean()), _std(x) if n > 1 else None, float(x[0]),
                     _quantile(x, 0.25), _quantile(x, 0.5), _quantile(x, 0.75), float(x[-1])))
    return ["rank", "stream", "idle_category", "count", "mean", "std", "min", "p25", "p50",
            "p75", "max"], rows


def _sweep(part: np.ndarray, ts: np.ndarray, e: np.ndarray, d: np.ndarray):
    """Time spent at each running sum of `d` (added at ts, removed at e) per rank: a list of
    (rank, running, time), running > 0."""
    rank = np.concatenate([part, part]) // 8
    t = np.concatenate([ts, e])
    dd = np.concatenate([d, -d])
    o = np.lexsort((dd, t, rank))
    rank, t, dd = rank[o], t[o], dd[o]
    running = np.cumsum(dd)  # every rank's intervals close, so the sum is 0 between ranks
    nxt = np.empty(len(t))
    if len(t):
        nxt[:-1] = t[1:]
        nxt[np.r_[_starts(rank)[1:] - 1, len(t) - 1]] = np.nan
    span = nxt - t
    out: dict[tuple[int, int], float] = {}
    keep = (running > 0) & ~np.isnan(span)
    for r, run, x in zip(rank[keep].tolist(), running[keep].tolist(), span[keep].tolist(), strict=True):
        out[(r, run)] = out.get((r, run), 0.0) + x
    return out


def _type_label(running: int) -> str:
    return " overlapping ".join(n for bit, n in ((1, "COMPUTATION"), (2, "COMMUNICATION"),
                                                 (4, "MEMORY")) if running & bit)


def kernel_types_per_rank(tl: TimelineArrays) -> Rows:
    m = tl.ktype < 3
    bit = np.left_shift(1, tl.ktype.astype(np.int64))
    p, s, e = _merged(tl, m, bit)
    times = _sweep(p, s, e, p % 8)
    rows = [(r, _type_label(run), t) for (r, run), t in sorted(times.items()) if t > 0]
    return ["rank", "kernel_type", "time_us"], rows


def kernel_types(tl: TimelineArrays) -> Rows:
    sums: dict[str, float] = {}
    for _, label, t in kernel_types_per_rank(tl)[1]:
        sums[label] = sums.get(label, 0.0) + t
    total = sum(sums.values())
    rows = [(k, v, _round(100 * v / total, 1)) for k, v in
            sorted(sums.items(), key=lambda kv: (-kv[1], kv[0]))]
    return ["kernel_type", "sum_us", "percentage"], rows


def kernels(tl: TimelineArrays, num_kernels: int = 10, duration_ratio: float = 0.8,
            include_memory: bool = True) -> Rows:
    m = tl.ktype <= (2 if include_memory else 1)  # KTYPES: COMPUTATION, COMMUNICATION, MEMORY
    names, rank, kt, dur = tl.name[m], tl.rank[m], tl.ktype[m], tl.dur[m]
    index: dict[Any, int] = {}
    code = np.fromiter((index.setdefault(n, len(index)) for n in names), np.int64, len(names))
    uniq = list(index)
    o = np.lexsort((code, kt, rank))
    b = _starts(rank[o], kt[o], code[o])
    groups: dict[tuple[int, int], list[tuple]] = {}
    for a, z in _spans(b, len(o)):
        x = dur[o[a:z]]
        n = len(x)
        mean = float(x.mean())
        std = _std(x) if n > 1 else 0.0
        key = (int(rank[o[a]]), int(kt[o[a]]))
        groups.setdefault(key, []).append((uniq[code[o[a]]], n, float(x.sum()), float(x.max()),
                                           float(x.min()), mean, std))
    rows = []
    for (r, k), per in groups.items():
        per.sort(key=lambda g: (-g[2], g[0]))
        cum = np.cumsum([g[2] for g in per])
        folded = len(per) > num_kernels
        q = _quantile(cum, duration_ratio)  # cum is ascending
        labels: dict[str, list[tuple]] = {}
        for i, g in enumerate(per):
            label = "others" if folded and (cum[i] > q or i >= num_kernels) else g[0]
            labels.setdefault(label, []).append(g)
        for label, gs in labels.items():
            sums = np.array([g[2] for g in gs])
            if folded:
                stats = (float(sums.max()), float(sums.min()), float(sums.mean()),
                         _std(sums) if len(gs) > 1 else 0.0)
            else:
                stats = gs[0][3:7]
            rows.append((r, KTYPES[k], label, sum(g[1] for g in gs), float(sums.sum()), *stats))
    rows.sort(key=lambda row: (row[1], row[2], row[0]))
    return ["rank", "kernel_type", "name", "calls", "sum_us", "max_us", "min_us", "mean_us",
            "std_us"], rows


def overlap(tl: TimelineArrays) -> Rows:
    cp, cs, ce = _merged(tl, tl.ktype == 1)
    mp, ms, me = _merged(tl, tl.ktype == 0)
    times = _sweep(np.concatenate([cp, mp]), np.concatenate([cs, ms]), np.concatenate([ce, me]),
                   np.concatenate([np.ones(len(cp), np.int64), np.full(len(mp), 2, np.int64)]))
    comm = {k // 8: v for k, v in _per_part_sum(cp, ce - cs).items()}
    rows = []
    for r in sorted(set(tl.rank.tolist())):
        ov = times.get((r, 3), 0.0)
        c = comm.get(r)
        pct = None if c is None else _pct(ov, c)
        rows.append((r, ov, c, pct))
    return ["rank", "overlap_us", "comm_us", "comp_comm_overlap_pctg"], rows


ANALYSES = {"temporal": temporal, "idle": idle, "idle_stats": idle_stats,
            "kernel_types": kernel_types, "kernels": kernels, "overlap": overlap}
