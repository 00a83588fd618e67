"""The collective match checks agree with PyTorch's own flight recorder analyzer (`Op.match`)
on every kind of mismatch, and the culprit is named by majority, then novelty, then rank."""

from __future__ import annotations

from typing import Any

import pytest

from playbooks.hang.load import Entry
from playbooks.hang.matching import (
    ANALYZER_NAME,
    DTYPE,
    FULLY_MATCHED,
    SIZE,
    STATE,
    TYPE,
    UNDECIDED,
    find_mismatches,
    match,
)


def ev(op: str = "all_reduce", ins: Any = ((4, 16),), outs: Any = None, dt: str = "Float",
       odt: str | None = None, state: str = "scheduled", seq: int = 1) -> dict[str, Any]:
    return {"profiling_name": f"nccl:{op}", "state": state, "process_group": ("0", "default_pg"),
            "input_sizes": [list(s) for s in ins],
            "output_sizes": [list(s) for s in (outs if outs is not None else ins)],
            "input_dtypes": [dt] * len(ins), "output_dtypes": [odt or dt] * len(outs or ins),
            "collective_seq_id": seq, "p2p_seq_id": 0, "time_created_ns": 1, "frames": []}


def entry(rank: int, e: dict[str, Any], record: int = 0) -> Entry:
    import math
    return Entry(rank=rank, record_id=record, pg_id=0, pg_name="0", pg_desc="default_pg",
                 seq=e["collective_seq_id"], op=e["profiling_name"].split(":")[1],
                 profiling_name=e["profiling_name"], input_sizes=e["input_sizes"],
                 input_dtypes=e["input_dtypes"], output_sizes=e["output_sizes"],
                 output_dtypes=e["output_dtypes"],
                 input_numel=sum(math.prod(s) for s in e["input_sizes"]),
                 output_numel=sum(math.prod(s) for s in e["output_sizes"]), state=e["state"],
                 retired=False, time_created_ns=1, thread_id="1", is_p2p=False)


CASES = [
    ("same", ev(), ev(), FULLY_MATCHED),
    ("type", ev(), ev("all_gather", outs=((2, 4, 16),)), TYPE),
    ("input size", ev(), ev(ins=((5, 16),)), SIZE),
    ("same numel other shape", ev(), ev(ins=((8, 8),)), SIZE),
    ("output size", ev("broadcast"), ev("broadcast", outs=((3,),)), SIZE),
    ("all_reduce in != out", ev(ins=((4, 16),), outs=((4, 8),)), ev(ins=((4, 16),), outs=((4, 8),)),
     SIZE),
    ("all_gather numel", ev("all_gather", ins=((4, 16),), outs=((3, 4, 16),)),
     ev("all_gather", ins=((4, 16),), outs=((3, 4, 16),)), SIZE),
    ("reduce_scatter numel", ev("reduce_scatter", ins=((8, 16),), outs=((4, 16),)),
     ev("reduce_scatter", ins=((8, 16),), outs=((4, 16),)), FULLY_MATCHED),
    ("reduce_scatter wrong", ev("reduce_scatter", ins=((6, 16),), outs=((4, 16),)),
     ev("reduce_scatter", ins=((6, 16),), outs=((4, 16),)), SIZE),
    ("dtype between ranks", ev(), ev(dt="Half"), DTYPE),
    ("dtype in vs out", ev(), ev(odt="BFloat16") | {"output_dtypes": ["BFloat16"]}, DTYPE),
    ("broadcast ignores input dtype", ev("broadcast", dt="Long"),
     ev("broadcast", dt="Long"), FULLY_MATCHED),
    ("state", ev(state="completed"), ev(state="started"), STATE),
    ("all_to_all", ev("all_to_all"), ev("all_to_all"), UNDECIDED),
]


@pytest.mark.parametrize("name, a, b, kind", CASES, ids=[c[0] for c in CASES])
def test_each_check(name: str, a: dict, b: dict, kind: str) -> None:
    assert match(entry(0, a), entry(1, b), group_size=2)[0] == kind


@pytest.mark.parametrize("name, a, b, kind", CASES, ids=[c[0] for c in CASES])
def test_same_verdict_as_pytorchs_analyzer(name: str, a: dict, b: dict, kind: str) -> None:
    types = pytest.importorskip("torch.distributed.flight_recorder.components.types")
    members = {"g": {0, 1}}
    theirs = types.Op(a, members, "g").match(types.Op(b, members, "g"))
    assert theirs.state.name == ANALYZER_NAME[kind]


def _seqs(rank: int, calls: list[dict]) -> list[Entry]:
    return [entry(rank, c | {"collective_seq_id": i + 1}, record=i) for i, c in enumerate(calls)]


def test_majority_names_the_odd_rank_among_four() -> None:
    calls = [ev(), ev("broadcast", ins=((1,),), dt="Long")] * 3
    entries = [e for r in range(4) for e in _seqs(r, calls + [ev(dt="Half" if r == 2 else "Float")])]
    m, = find_mismatches(entries, {"0": [0, 1, 2, 3]})
    assert (m.seq, m.kind, m.culprits, m.reference, m.how_named) == (7, DTYPE, [2], [0, 1, 3], "majority")


def test_two_ranks_the_call_never_seen_before_is_the_culprit() -> None:
    calls = [ev()] * 5
    # rank 0 is the odd one here: the reference-rank rule would blame rank 1
    entries = _seqs(0, calls + [ev(ins=((4, 17),))]) + _seqs(1, calls + [ev()])
    m, = find_mismatches(entries, {"0": [0, 1]})
    assert (m.culprits, m.how_named, m.seen_before) == ([0], "novelty_after_2", {0: 0, 1: 3})


def test_a_familiar_call_out_of_its_place_in_the_step_is_the_culprit() -> None:
    # each step: broadcast, 2 all-reduces, an all-gather of the same tensor; rank 1 gathers
    # where the first all-reduce belongs. Both calls occurred before: only the order tells.
    bc, ar, ag = ev("broadcast", ins=((1,),), dt="Long"), ev(), ev("all_gather", outs=((2, 4, 16),))
    step = [bc, ar, ar, ag]
    entries = _seqs(0, step * 4 + [bc, ar]) + _seqs(1, step * 4 + [bc, ag])
    m, = find_mismatches(entries, {"0": [0, 1]})
    assert (m.seq, m.kind, m.culprits, m.how_named) == (18, TYPE, [1], "novelty_after_2")
    assert m.seen_before == {0: 3, 1: 0}  # (all_gather, broadcast) -> all_reduce, per step boundary


def test_two_familiar_calls_fall_back_to_the_reference_rank() -> None:
    a, b = ev(), ev("broadcast", ins=((1,),), dt="Long")
    entries = _seqs(0, [a, b, a]) + _seqs(1, [a, b, b])
    m, = find_mismatches(entries, {"0": [0, 1]})
    assert (m.seq, m.kind, m.culprits, m.how_named) == (3, TYPE, [1], "reference_rank")


def test_ring_buffer_start_is_not_a_missing_collective() -> None:
    calls = [ev()] * 8
    entries = _seqs(0, calls)[3:] + _seqs(1, calls)  # rank 0's buffer dropped its oldest
    assert find_mismatches(entries, {"0": [0, 1]}) == []


def test_state_difference_alone_is_not_a_mismatch_finding() -> None:
    entries = _seqs(0, [ev(), ev(state="completed")]) + _seqs(1, [ev(), ev(state="started")])
    assert find_mismatches(entries, {"0": [0, 1]}) == []
