"""The pair matrix's verdict: which rank (or which pair) has slow point-to-point links.

Every pair exchanged the same message, pair after pair within each repeat, so each repeat
is one snapshot of the whole matrix under the same load. A slow rank makes all its pairs
slow; a slow link makes one pair slow. Both are judged against peers measured in the same
run, never against an absolute figure (`stats.compare_levels`: each pair's 25th percentile
over the repeats, since a burst of load only adds time, with an interval from resampling
whole repeats):

1. the rank whose pairs have the highest median time is the candidate; its pairs' median per
   repeat is compared with the median of the pairs without it. Slower by the threshold: that
   rank is named, and the pairs without it are the reference for step 2;
2. each pair is compared with the median of the reference pairs (all others, where no rank
   was named) in the same repeat; the slower ones are named.

With 2 ranks there is one pair and nothing to compare it with: the verdict says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from probes.links.stats import LEVEL_Q, Comparison, compare_levels

Pair = tuple[int, int]


@dataclass
class PairVerdict:
    status: str                     # slow_rank | slow_pairs | no_slow_pair | cannot_tell
    message: str
    rank: int | None = None
    slow_pairs: list[Pair] = field(default_factory=list)
    rank_comparison: Comparison | None = None
    pair_comparisons: dict[Pair, Comparison] = field(default_factory=dict)

    @property
    def unsettled(self) -> bool:
        """A comparison is still unclear: more repeats may change the verdict."""
        cmps = [*self.pair_comparisons.values(), *([self.rank_comparison] if self.rank_comparison else [])]
        return self.status == "cannot_tell" or any(c.verdict == "unclear" for c in cmps)

    def as_dict(self) -> dict[str, object]:
        return {"status": self.status, "message": self.message, "rank": self.rank,
                "slow_pairs": [list(p) for p in self.slow_pairs],
                "rank_comparison": self.rank_comparison.as_dict() if self.rank_comparison else None,
                "pairs": [{"pair": list(p), **c.as_dict()} for p, c in self.pair_comparisons.items()]}


def all_pairs(n: int) -> list[Pair]:
    return [(i, j) for i in range(n) for j in range(i + 1, n)]


def _fmt(p: Pair) -> str:
    return f"({p[0]},{p[1]})"


def analyse_pairs(n: int, pairs: list[Pair], times: np.ndarray, threshold: float = 1.5) -> PairVerdict:
    """`times[p, r]`: pair p's time in repeat r."""
    times = np.asarray(times, float)
    if len(pairs) < 2 or n < 3:
        return PairVerdict("cannot_tell", f"{n} ranks give {len(pairs)} pair(s): nothing to compare a pair "
                           "with (a slow link between 2 ranks cannot be told from a slow pair of ranks)")
    level = np.quantile(times, LEVEL_Q, axis=1)
    score = {r: float(np.median([level[k] for k, p in enumerate(pairs) if r in p])) for r in range(n)}
    cand = max(score, key=lambda r: score[r])
    with_c = [k for k, p in enumerate(pairs) if cand in p]
    without = [k for k, p in enumerate(pairs) if cand not in p]
    rank_cmp = compare_levels(times, with_c, without, threshold)
    rank = cand if rank_cmp.verdict == "a_slower" else None
    ref = without if rank is not None else list(range(len(pairs)))
    cmps: dict[Pair, Comparison] = {}
    for k, p in enumerate(pairs):
        # the reference pair itself (3 ranks: one pair without the rank) is judged against the rest
        others = [j for j in ref if j != k] or [j for j in range(len(pairs)) if j != k]
        cmps[p] = compare_levels(times, [k], others, threshold)
    slow = [p for p, c in cmps.items() if c.verdict == "a_slower"]
    unclear = [p for p, c in cmps.items() if c.verdict == "unclear"]
    if rank is not None:
        return PairVerdict("slow_rank", f"rank {rank} is slow: its pairs are {rank_cmp.ratio:.2f}x the pairs "
                           f"without it; slow pairs {', '.join(map(_fmt, slow)) or 'none alone'}",
                           rank, slow, rank_cmp, cmps)
    if slow:
        return PairVerdict("slow_pairs", f"slow link(s) {', '.join(map(_fmt, slow))}: "
                           + ", ".join(f"{cmps[p].ratio:.2f}x" for p in slow) + " the other pairs; no rank is "
                           "slow with all its peers", None, slow, rank_cmp, cmps)
    if unclear or rank_cmp.verdict == "unclear":
        return PairVerdict("cannot_tell", "cannot tell: pair(s) " + ", ".join(map(_fmt, unclear or pairs))
                           + " differ from their peers by a ratio the repeats do not agree on; rerun with "
                           "more repeats or a larger --pair-size", None, [], rank_cmp, cmps)
    return PairVerdict("no_slow_pair", f"all {len(pairs)} pairs measure the same (within {threshold:g}x of "
                       "their peers): no slow link", None, [], rank_cmp, cmps)
