"""Which rank's links are slow: bisect the ranks with subgroup all-reduces.

A collective runs at the pace of its slowest member, so a group that contains the slow rank
is slow and a group without it is not. Split the candidates in two halves and measure each
half's all-reduce, repeat by repeat in turn (`stats.compare`); the slower half holds the
culprit and the other half is healthy. Keep splitting the slower half; once halves shrink
below two ranks, fill each side with the same number of ranks already shown healthy so both
groups have the same size and differ only in the candidates. log2(n) comparisons name one
rank out of n.

Every comparison is between peers measured in the same run, never against a figure from
elsewhere, so the machine's speed, its load and the message size cancel out. When a step
cannot tell (the ratio stays in the grey band after the most repeats allowed) or both halves
measure the same, the verdict says so and names no rank:

- `slow_rank`: one rank, and each comparison that led to it;
- `no_slow_rank`: the first split found both halves the same;
- `not_single_rank`: a later split found its halves the same, so the slowness needs more
  than one of the remaining candidates (a slow link between two of them, say);
- `cannot_tell`: a comparison stayed unclear (too noisy), or too few ranks to bisect.

An odd count at the first split leaves one rank out; if the halves match, that rank is then
swapped into a half and compared with it.

`measure(step, groups, first_repeat, repeats)` returns, per group, its time (any unit) for
each repeat; the probe's worker measures real all-reduces, the unit tests a model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from probes.links.stats import Comparison, compare

Group = tuple[int, ...]
Measure = Callable[[int, list[Group], int, int], list[list[float]]]


@dataclass(frozen=True)
class Step:
    step: int
    a: Group
    b: Group
    comparison: Comparison
    times_a: tuple[float, ...]
    times_b: tuple[float, ...]

    def as_dict(self) -> dict[str, object]:
        return {"step": self.step, "a": list(self.a), "b": list(self.b), **self.comparison.as_dict(),
                "median_a": float(np.median(self.times_a)), "median_b": float(np.median(self.times_b))}


@dataclass
class RankVerdict:
    status: str              # slow_rank | no_slow_rank | not_single_rank | cannot_tell
    message: str
    rank: int | None = None
    candidates: list[int] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return {"status": self.status, "message": self.message, "rank": self.rank,
                "candidates": self.candidates, "steps": [s.as_dict() for s in self.steps]}


def _g(ranks: Sequence[int]) -> Group:
    return tuple(sorted(ranks))


def _names(g: Group) -> str:
    return "{" + ",".join(map(str, g)) + "}"


class _Runner:
    def __init__(self, measure: Measure, threshold: float, repeats: int, max_repeats: int) -> None:
        self.measure, self.threshold = measure, threshold
        self.repeats, self.max_repeats = repeats, max(repeats, max_repeats)
        self.steps: list[Step] = []

    def compare(self, a: Group, b: Group) -> Step:
        step = len(self.steps)
        ta: list[float] = []
        tb: list[float] = []
        while True:
            n = min(self.repeats, self.max_repeats - len(ta))
            got = self.measure(step, [a, b], len(ta), n)
            ta += got[0]
            tb += got[1]
            c = compare(np.array(ta), np.array(tb), self.threshold)
            if c.verdict != "unclear" or len(ta) >= self.max_repeats:
                break
        s = Step(step, a, b, c, tuple(ta), tuple(tb))
        self.steps.append(s)
        return s


def bisect_ranks(n: int, measure: Measure, threshold: float = 1.5, repeats: int = 5,
                 max_repeats: int = 15) -> RankVerdict:
    if n < 4:
        return RankVerdict("cannot_tell", f"{n} ranks cannot be bisected: it takes two disjoint "
                           "groups of at least two ranks (4 ranks); use the pair matrix (--pairwise)")
    run = _Runner(measure, threshold, repeats, max_repeats)
    half = n // 2
    cand, good = list(range(n)), list[int]()
    a, b = _g(cand[:half]), _g(cand[half:2 * half])
    s = run.compare(a, b)
    v = s.comparison.verdict
    if v == "unclear":
        return RankVerdict("cannot_tell", _unclear(s, threshold), candidates=cand, steps=run.steps)
    if v == "same":
        if n % 2 == 0:
            return RankVerdict("no_slow_rank", f"halves {_names(a)} and {_names(b)} measure the same "
                               f"(ratio {s.comparison.ratio:.2f}): no rank is slower than its peers",
                               steps=run.steps)
        x = cand[-1]  # the rank the split left out: swap it into a half
        s = run.compare(_g([*a[1:], x]), a)
        v = s.comparison.verdict
        if v == "a_slower":
            return RankVerdict("slow_rank", f"rank {x} is slow: {_names(s.a)} is {s.comparison.ratio:.2f}x "
                               f"{_names(s.b)}", rank=x, candidates=[x], steps=run.steps)
        if v == "same":
            return RankVerdict("no_slow_rank", "all groups measure the same: no rank is slower than its "
                               "peers", steps=run.steps)
        return RankVerdict("cannot_tell", _unclear(s, threshold), candidates=cand, steps=run.steps)
    cand, good = (list(a), list(b)) if v == "a_slower" else (list(b), list(a))
    while len(cand) > 1:
        ca, cb = cand[: (len(cand) + 1) // 2], cand[(len(cand) + 1) // 2:]
        k = max(len(ca), 2)
        ga, gb = _g(ca + good[: k - len(ca)]), _g(cb + good[: k - len(cb)])
        s = run.compare(ga, gb)
        v = s.comparison.verdict
        if v == "unclear":
            return RankVerdict("cannot_tell", _unclear(s, threshold), candidates=cand, steps=run.steps)
        if v == "same":
            return RankVerdict("not_single_rank", f"{_names(ga)} and {_names(gb)} measure the same "
                               f"(ratio {s.comparison.ratio:.2f}): the slowness needs more than one of "
                               f"ranks {_names(_g(cand))} (a slow link between two of them?)",
                               candidates=cand, steps=run.steps)
        cand, good = (ca, good + cb) if v == "a_slower" else (cb, good + ca)
    r = cand[0]
    last = run.steps[-1]
    ratio = last.comparison.ratio if last.comparison.verdict == "a_slower" else 1 / last.comparison.ratio
    return RankVerdict("slow_rank", f"rank {r} is slow: every group with it was slower than its peers "
                       f"({len(run.steps)} comparisons; last {ratio:.2f}x)", rank=r, candidates=[r],
                       steps=run.steps)


def _unclear(s: Step, threshold: float) -> str:
    c = s.comparison
    return (f"cannot tell: {_names(s.a)} vs {_names(s.b)} measured {c.ratio:.2f}x (90% interval "
            f"{c.low:.2f}-{c.high:.2f}x over {len(c.ratios)} repeats); a verdict needs the median beyond "
            f"{threshold:g}x with the interval above {threshold ** 0.5:.2f}x, or the interval within "
            f"{threshold:g}x: too noisy for this size, rerun with a larger --bisect-size or more repeats")
