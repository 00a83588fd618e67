"""Do the ranks agree on each collective? The checks of PyTorch's flight recorder analyzer.

PyTorch's analyzer (torch/distributed/flight_recorder, `Op.match` in components/types.py)
lines entries up across ranks by process group and `collective_seq_id` and compares them
in this order; the first check that fails names the mismatch:

1. type: the op differs (all_reduce vs all_gather)          -> collective_type_mismatch
2. sizes: input sizes differ (not for all_to_all, scatter); output sizes differ (not for
   all_to_all, gather); all_reduce's input is not its output; all_gather's output numel is
   not input numel x group size; reduce_scatter's input numel is not output numel x group
   size                                                        -> size_or_syntax_mismatch
3. dtypes: input and output dtypes of one rank differ (not scatter, gather, broadcast), or
   the two ranks' input (not scatter, broadcast) or output (not gather) dtypes differ
                                                               -> collective_dtype_mismatch
4. state: scheduled / started / completed differ              -> collective_state_mismatch
5. all_to_all cannot be judged from one pair                  -> undecided

This is our own implementation of those rules (it reads the store, not pickles). Who is the
culprit is ours too: the analyzer blames every rank that differs from the first rank it
looked at. Here the rank whose collective differs from the majority is named. With a tie
(two ranks) the steps' own rhythm decides: an engine repeats the same calls in the same
order every step, so the faulty call is the one that never followed the two (then one)
calls before it in this group, or never occurred at all; failing that, the lowest rank is
taken as the reference, as the analyzer does, and the finding says the call was a tie.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from playbooks.hang.load import Entry

FULLY_MATCHED = "fully_matched"
TYPE = "collective_type_mismatch"
SIZE = "size_or_syntax_mismatch"
DTYPE = "collective_dtype_mismatch"
STATE = "collective_state_mismatch"
UNDECIDED = "undecided"
# The analyzer's MatchState names, for readers who know them.
ANALYZER_NAME = {TYPE: "COLLECTIVE_TYPE_MISMATCH", SIZE: "SIZE_OR_SYNTAX_MISMATCH",
                 DTYPE: "COLLECTIVE_DTYPE_MISMATCH", STATE: "COLLECTIVE_STATE_MISMATCH",
                 UNDECIDED: "UNDECIDED", FULLY_MATCHED: "FULLY_MATCHED"}


def _numel(sizes: list[list[int]]) -> int:
    return math.prod(sizes[0]) if sizes else 0


def _dtype_mismatch(a: Entry, b: Entry) -> bool:
    return bool(
        (a.op not in ("scatter", "gather", "broadcast")
         and set(a.input_dtypes) != set(a.output_dtypes) and a.input_sizes and a.output_sizes
         and a.input_sizes[0] and a.output_sizes[0])
        or (a.op not in ("scatter", "broadcast") and set(a.input_dtypes) != set(b.input_dtypes)
            and a.input_sizes and b.input_sizes and a.input_sizes[0] and b.input_sizes[0])
        or (a.op != "gather" and set(a.output_dtypes) != set(b.output_dtypes)
            and a.output_sizes and b.output_sizes and a.output_sizes[0] and b.output_sizes[0]))


def match(a: Entry, b: Entry, group_size: int) -> tuple[str, str]:
    """(kind, detail) of comparing rank b's collective with reference a (same seq id)."""
    if a.op != b.op:
        return TYPE, f"{a.op} on rank {a.rank} vs {b.op} on rank {b.rank}"
    if a.op not in ("all_to_all", "scatter") and a.input_sizes != b.input_sizes:
        return SIZE, f"input sizes {a.input_sizes} on rank {a.rank} vs {b.input_sizes} on rank {b.rank}"
    if a.op not in ("all_to_all", "gather") and a.output_sizes != b.output_sizes:
        return SIZE, f"output sizes {a.output_sizes} on rank {a.rank} vs {b.output_sizes} on rank {b.rank}"
    if a.op in ("all_reduce", "allreduce_coalesced") and a.input_sizes != b.output_sizes:
        return SIZE, f"all_reduce input {a.input_sizes} on rank {a.rank} is not the output {b.output_sizes} on rank {b.rank}"
    if (a.op in ("all_gather", "_all_gather_base", "all_gather_into_tensor_coalesced")
            and _numel(b.output_sizes) != _numel(a.input_sizes) * group_size):
        return SIZE, (f"all_gather output numel {_numel(b.output_sizes)} on rank {b.rank} is not "
                      f"input numel {_numel(a.input_sizes)} x group size {group_size}")
    if (a.op in ("reduce_scatter", "_reduce_scatter_base", "reduce_scatter_tensor_coalesced")
            and _numel(b.input_sizes) != _numel(a.output_sizes) * group_size):
        return SIZE, (f"reduce_scatter input numel {_numel(b.input_sizes)} on rank {b.rank} is "
                      f"not output numel {_numel(a.output_sizes)} x group size {group_size}")
    if _dtype_mismatch(a, b):
        return DTYPE, (f"dtypes {sorted(set(a.input_dtypes))}->{sorted(set(a.output_dtypes))} on "
                       f"rank {a.rank} vs {sorted(set(b.input_dtypes))}->"
                       f"{sorted(set(b.output_dtypes))} on rank {b.rank}")
    if a.state != b.state:
        return STATE, f"state {a.state} on rank {a.rank} vs {b.state} on rank {b.rank}"
    if a.op == "all_to_all":
        return UNDECIDED, "all_to_all sizes are only decidable over all ranks"
    return FULLY_MATCHED, ""


@dataclass
class Mismatch:
    pg_name: str
    pg_desc: str
    seq: int
    kind: str
    detail: str
    culprits: list[int]
    reference: list[int]                 # ranks that agree with the majority / reference
    entries: dict[int, Entry]
    how_named: str                       # majority | novelty[_after_N] | reference_rank | all_ranks
    seen_before: dict[int, int]          # per rank: earlier occurrences of its call (in that context)


def _seen(past: list[tuple], sig: tuple, context: int) -> int:
    """How often `sig` followed the last `context` calls of `past` earlier in `past`."""
    if context == 0:
        return sum(1 for p in past if p == sig)
    if len(past) < context:
        return 0
    want = tuple(past[-context:]) + (sig,)
    n = context + 1
    return sum(1 for i in range(len(past) - n + 1) if tuple(past[i:i + n]) == want)


def _culprits(entries: dict[int, Entry], past: list[tuple]) -> tuple[list[int], list[int], str, dict]:
    """(culprits, reference ranks, how named, earlier occurrences per rank's call)."""
    by_sig: dict[tuple, list[int]] = {}
    for r, e in sorted(entries.items()):
        by_sig.setdefault(e.signature(), []).append(r)
    groups = sorted(by_sig.values(), key=lambda rs: (-len(rs), rs[0]))
    seen0 = {r: _seen(past, e.signature(), 0) for r, e in entries.items()}
    if len(groups) == 1:  # every rank issued the same call and it breaks the op's own rules
        return sorted(entries), [], "all_ranks", seen0
    if len(groups[0]) > len(groups[1]):
        return sorted(r for g in groups[1:] for r in g), groups[0], "majority", seen0
    # A tie. Steps repeat the same calls in the same order, so the faulty call is the one
    # that never followed the calls before it (the last two, then the last one, then any).
    for context in (2, 1, 0):
        seen = {tuple(g): _seen(past, entries[g[0]].signature(), context) for g in groups}
        familiar = [g for g in groups if seen[tuple(g)] > 0]
        if familiar and len(familiar) < len(groups):
            ref = max(familiar, key=lambda g: (len(g), seen[tuple(g)]))
            seen_r = {r: seen[tuple(g)] for g in groups for r in g}
            return (sorted(r for g in groups if g is not ref for r in g), ref,
                    "novelty" if context == 0 else f"novelty_after_{context}", seen_r)
    ref = next(g for g in groups if min(entries) in g)
    return sorted(r for g in groups if g is not ref for r in g), ref, "reference_rank", seen0


def judge(at: dict[int, Entry], past: list[tuple], group_size: int) -> Mismatch | None:
    """The ranks' entries at one sequence id of one group (`past`: the group's matched calls
    before it, in order): a Mismatch when the type, sizes or dtypes disagree, else None."""
    ref_rank = min(at)
    kinds = [match(at[ref_rank], at[r], group_size) for r in sorted(at) if r != ref_rank]
    bad = [k for k in kinds if k[0] in (TYPE, SIZE, DTYPE)]
    if not bad:
        return None
    culprits, ref, how, seen = _culprits(at, past)
    kind, detail = match(at[ref[0]], at[culprits[0]], group_size) if ref else bad[0]
    e0 = at[ref_rank]
    return Mismatch(e0.pg_name, e0.pg_desc, e0.seq, kind, detail, culprits, ref, at, how, seen)


def find_mismatches(entries: list[Entry], members: dict[str, list[int]]) -> list[Mismatch]:
    """The first mismatched collective per process group, in the window every dumped rank
    still holds (a ring buffer drops the oldest entries). Like the analyzer, a group is not
    paired past its first mismatch: later sequence ids may be shifted by it."""
    out: list[Mismatch] = []
    by_pg: dict[str, dict[int, dict[int, Entry]]] = {}
    for e in entries:
        if not e.is_p2p:
            by_pg.setdefault(e.pg_name, {}).setdefault(e.rank, {})[e.seq] = e
    for pg, ranks in sorted(by_pg.items()):
        group_size = len(members.get(pg) or ranks)
        start = max(min(seqs) for seqs in ranks.values())
        past: list[tuple] = []   # the matched calls of this group, in order
        for seq in sorted({s for seqs in ranks.values() for s in seqs if s >= start}):
            at = {r: seqs[seq] for r, seqs in ranks.items() if seq in seqs}
            if len(at) < 2:
                continue
            m = judge(at, past, group_size)
            if m is not None:
                out.append(m)
                break
            past.append(at[min(at)].signature())
    return out
