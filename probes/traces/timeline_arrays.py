"""The analysed GPU events of an in-memory trace: `timeline_sql.EVENTS` computed in numpy.

Same selection and times as the SQL the store path runs, rule for rule (its module docstring
says why each is HTA's): GPU ops are complete events on a stream other than -1 (not GPU
annotations or the profiler's own span); with two or more distinct `ProfilerStep` names the
last step of each rank is cut off (a GPU op stays when a launch call sharing its correlation
started before the cut; an op without a correlation when it started before it); with
sub-microsecond timestamps every event is rounded inward to whole microseconds, from the
doubles HTA parses (`hta_doubles`); times are microseconds from `origin`, a whole
microsecond at or before the first GPU op.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from probes.traces.categories import ANNOTATION_CATEGORIES, CPU_OP_CATEGORIES, GPU_CATEGORIES
from probes.traces.kineto_columns import RankEvents

_NOT_GPU = ("gpu_user_annotation", "Trace")
_STEP_CATS = CPU_OP_CATEGORIES + ANNOTATION_CATEGORIES
KINDS = ("kernel", "memcpy", "memset", "sync", "other")
KTYPES = ("COMPUTATION", "COMMUNICATION", "MEMORY", "OTHER")
_COMM = re.compile(r"^nccl.*Kernel")
_MEM = re.compile(r"^(Memcpy|Memset|dma)")
_NOT_COMP = re.compile(r"^(nccl.*Kernel|.*Memcpy|Memset|.*Sync)")


def kernel_type(name: str | None) -> int:
    """Index into KTYPES of a GPU event name, as HTA 0.5.0 decides it (timeline_sql.KERNEL_TYPE)."""
    if name is None:
        return 3
    if _COMM.search(name):
        return 1
    if _MEM.search(name):
        return 2
    return 3 if _NOT_COMP.search(name) else 0


@dataclass
class TimelineArrays:
    """One row per analysed GPU event, rank file by rank file, in file order. Owns its arrays.

    ts/e/dur are microseconds (float64) from the origin; launch_ts/launch_e are the launch
    call's (NaN without one); kind and ktype index KINDS and KTYPES."""

    rank: np.ndarray
    event_id: np.ndarray
    name: np.ndarray            # object
    kind: np.ndarray            # int8
    ktype: np.ndarray           # int8
    stream: np.ndarray
    correlation: np.ndarray
    ts: np.ndarray
    e: np.ndarray
    launch_ts: np.ndarray
    launch_e: np.ndarray

    @property
    def dur(self) -> np.ndarray:
        return self.e - self.ts

    def check_invariants(self) -> None:
        """Raise AssertionError when the columns disagree with each other."""
        n = len(self.ts)
        for f in self.__dataclass_fields__:
            assert len(getattr(self, f)) == n, f"{f}: {len(getattr(self, f))} rows, not {n}"
        assert ((self.kind >= 0) & (self.kind < len(KINDS))).all(), "kind out of KINDS"
        assert ((self.ktype >= 0) & (self.ktype < len(KTYPES))).all(), "ktype out of KTYPES"
        assert (self.stream != -1).all(), "an event without a stream"
        assert np.isfinite(self.ts).all() and np.isfinite(self.e).all(), "a time is not finite"
        assert (np.isnan(self.launch_ts) == np.isnan(self.launch_e)).all(), "half a launch"
        # rounding inward moves each end less than a microsecond, to whole microseconds: an
        # op shorter than one can end up to one before it starts (HTA does the same), no more
        assert (self.e - self.ts >= -1).all(), "an op ends over a microsecond before it starts"
        launched = ~np.isnan(self.launch_ts)
        assert (self.correlation[launched] != -1).all(), "a launch without a correlation"

    def __len__(self) -> int:
        return len(self.ts)


def _codes(values: np.ndarray) -> tuple[list, np.ndarray]:
    """Distinct values (first-seen order) and each row's index into them (None included)."""
    vals = values.tolist()
    uniq = list(dict.fromkeys(vals))  # C-level passes: a trace has a few hundred names
    index = {v: i for i, v in enumerate(uniq)}
    return uniq, np.fromiter(map(index.__getitem__, vals), np.int64, len(vals))


def _per_value(values: np.ndarray, fn, codes: tuple[list, np.ndarray] | None = None) -> np.ndarray:
    """fn of each row's value, calling fn once per distinct value."""
    uniq, inv = codes if codes is not None else _codes(values)
    table = np.array([fn(u) for u in uniq]) if uniq else np.zeros(0)
    return table[inv] if len(values) else table


def hta_doubles(start_ns: np.ndarray, end_ns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A Kineto event's start and end (us) as the doubles HTA rounds: the `ts` literal's
    nearest double, and that plus the `dur` literal's. An epoch-microsecond ts (1.7e15) is
    a double only to a quarter microsecond, so rounding it, not the exact literal, is what
    gives HTA's numbers (exact rounding put 0.3 points more idle on a real trace). q + r/1000
    is the literal's nearest double: q is exact, r/1000 has 3 decimals and so is never
    close enough to a rounding midpoint (a multiple of 1/8 or finer) for its own error to
    matter. timeline_sql.HTA_TS is the same in SQL."""
    q = start_ns // 1000
    ts = q.astype(np.float64) + (start_ns - q * 1000) / 1000.0
    return ts, ts + (end_ns - start_ns) / 1000.0


def _us(start_ns: np.ndarray, end_ns: np.ndarray, origin: int, rounding: bool,
        ) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) in us from origin; rounded inward, as HTA rounds, when `rounding`."""
    if not rounding:
        return (start_ns - origin) / 1000.0, (end_ns - origin) / 1000.0
    ts, end = hta_doubles(start_ns, end_ns)
    o = float(origin // 1000)  # a whole microsecond: the differences stay exact
    return np.ceil(ts) - o, np.floor(end) - o


def select(ranks: list[RankEvents]) -> TimelineArrays:
    """The analysed GPU events of a trace made of `ranks` (one RankEvents per rank file)."""
    gpu, api, steps = [], [], []
    for r in ranks:
        cats = _codes(r.cat)
        not_gpu = _per_value(r.cat, lambda c: c in _NOT_GPU, cats).astype(bool)
        gpu.append(np.flatnonzero((r.stream != -1) & ~not_gpu))
        is_api = _per_value(r.cat, lambda c: c.lower().endswith(("runtime", "driver")), cats)
        api.append(np.flatnonzero(is_api.astype(bool) & (r.stream == -1) & (r.correlation != -1)))
        cand = np.flatnonzero(_per_value(r.cat, lambda c: c in _STEP_CATS, cats).astype(bool))
        is_step = [n is not None and "ProfilerStep" in n for n in r.name[cand].tolist()]
        steps.append(cand[np.array(is_step, dtype=bool)] if len(cand) else cand)
    starts = [r.start_ns[g] for r, g in zip(ranks, gpu, strict=True) if len(g)]
    if not starts:
        return _empty()
    origin = (int(min(s.min() for s in starts)) // 1000) * 1000
    step_names = {n for r, s in zip(ranks, steps, strict=True) for n in set(r.name[s])}
    cutting = len(step_names) >= 2
    parts = []
    for r, g, a, s in zip(ranks, gpu, api, steps, strict=True):
        cut = int(r.start_ns[s].max()) if cutting and len(s) else None
        if cutting and cut is None:
            continue  # HTA keeps no event of a rank without steps once it cuts others
        parts.append(_rank_rows(r, g, a, origin, cut, cutting))
    parts = [p for p in parts if len(p.ts)]
    if not parts:
        return _empty()
    return TimelineArrays(*(np.concatenate([getattr(p, f) for p in parts])
                            for f in TimelineArrays.__dataclass_fields__))


def _rank_rows(r: RankEvents, g: np.ndarray, a: np.ndarray, origin: int, cut: int | None,
               cutting: bool) -> TimelineArrays:
    rnd = r.round_to_us
    # Launch calls per correlation: the earliest call is the launch (Nsight nests two).
    order = np.lexsort((r.event_id[a], r.start_ns[a], r.correlation[a]))
    a = a[order]
    corr = r.correlation[a]
    first = np.flatnonzero(np.r_[True, corr[1:] != corr[:-1]]) if len(a) else np.zeros(0, np.int64)
    l_corr = corr[first]
    l_ts, l_e = _us(r.start_ns[a[first]], r.end_ns[a[first]], origin, rnd)
    if cut is None:
        l_before = np.ones(len(first), dtype=bool)
    else:
        a_start = r.start_ns[a]
        if rnd:
            cut_ts = np.ceil(hta_doubles(np.array([cut]), np.array([cut]))[0])
            early = np.ceil(hta_doubles(a_start, a_start)[0]) < cut_ts
        else:
            early = a_start < cut
        l_before = (np.logical_or.reduceat(early, first) if len(first)
                    else np.zeros(0, dtype=bool))
    g_corr = r.correlation[g]
    pos = np.searchsorted(l_corr, g_corr)
    pos_c = np.minimum(pos, max(len(l_corr) - 1, 0))
    matched = (pos < len(l_corr)) & (l_corr[pos_c] == g_corr) if len(l_corr) else np.zeros(len(g), bool)
    if cutting:
        keep = np.where(g_corr >= 0, matched & l_before[pos_c] if len(l_corr) else False,
                        r.start_ns[g] < cut)
        g, pos_c, matched = g[keep], pos_c[keep], matched[keep]
    names = r.name[g]
    ts, e = _us(r.start_ns[g], r.end_ns[g], origin, rnd)
    return TimelineArrays(
        rank=np.full(len(g), r.rank, dtype=np.int64),
        event_id=r.event_id[g],
        name=names,
        kind=_per_value(r.cat[g], lambda c: KINDS.index(GPU_CATEGORIES.get(c, "other"))).astype(np.int8),
        ktype=_per_value(names, kernel_type).astype(np.int8),
        stream=r.stream[g],
        correlation=r.correlation[g],
        ts=ts,
        e=e,
        launch_ts=np.where(matched, l_ts[pos_c] if len(l_corr) else np.nan, np.nan),
        launch_e=np.where(matched, l_e[pos_c] if len(l_corr) else np.nan, np.nan),
    )


def _empty() -> TimelineArrays:
    z = np.zeros(0)
    return TimelineArrays(rank=z.astype(np.int64), event_id=z.astype(np.int64),
                          name=np.empty(0, dtype=object), kind=z.astype(np.int8),
                          ktype=z.astype(np.int8), stream=z.astype(np.int64),
                          correlation=z.astype(np.int64), ts=z, e=z, launch_ts=z, launch_e=z)
