"""The store-backed mismatch search (SQL candidates, then `judge`) finds exactly what the
in-memory pass over every entry finds, on generated captures: 2-6 ranks, wrapped ring
buffers that start at different sequence ids, and one rank's call perturbed (type, shape,
same-numel reshape, dtype, a syntax error on every rank) or none."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from playbooks.hang.desync import find_mismatches_in_store
from playbooks.hang.load import entries_at
from playbooks.hang.matching import find_mismatches
from probes.hang.frdump import parse_dump
from probes.hang.model import Capture, RankCapture
from probes.hang.writer import write_capture
from tests.support.fr_dumps import dump_bytes
from tests.support.stores import new_store

CALLS = [("broadcast", [1], "Long"), ("all_reduce", [4, 64], "BFloat16"),
         ("all_reduce", [4, 64], "BFloat16"), ("all_gather", [4, 64], "BFloat16")]


def _perturb(call, how: str, world: int):
    op, shape, dt = call
    return {"type": ("reduce_scatter" if op != "reduce_scatter" else "all_reduce", shape, dt),
            "shape": (op, [shape[0] + 1, *shape[1:]], dt),
            "reshape": (op, [shape[0] * 2, shape[1] // 2] if len(shape) > 1 else [shape[0]], dt),
            "dtype": (op, shape, "Float" if dt != "Float" else "Half")}[how]


def _case(rng: random.Random):
    world = rng.randint(2, 6)
    n = rng.randint(8, 40)
    step = CALLS[: rng.randint(2, 4)]
    calls = [step[i % len(step)] for i in range(n)]
    per: dict[int, list] = {r: list(calls) for r in range(world)}
    how = rng.choice(["none", "type", "shape", "reshape", "dtype", "dtype"])
    if how != "none":
        at, who = rng.randrange(n), rng.randrange(world)
        per[who][at] = _perturb(per[who][at], how, world)
    starts = {r: rng.randint(0, 5) for r in range(world)}  # ring buffer dropped the oldest
    return world, per, starts, how


@pytest.mark.parametrize("seed", range(40))
def test_store_search_equals_the_full_pass(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    world, per, starts, how = _case(rng)
    cap = Capture(f"hg-desync-{seed}", "dumps", "x", [], world_size=world)
    for r in range(world):
        calls = per[r][starts[r]:]
        rc = RankCapture(r)
        rc.dump = parse_dump(dump_bytes(r, world, calls, len(calls), 10**18,
                                        first_seq=1 + starts[r]), f"rank_{r}")
        rc.dump_status = "ok"
        cap.ranks.append(rc)
    con = new_store(tmp_path / "s.duckdb")
    write_capture(con, cap)
    members = {"0": list(range(world))}
    stored = find_mismatches_in_store(con, cap.capture_id, members)
    everything = [e for s in range(1, 60) for e in entries_at(con, cap.capture_id, "0", s)]
    full = find_mismatches(everything, members)
    con.close()
    key = [(m.seq, m.kind, m.culprits, m.reference, m.how_named, m.seen_before) for m in stored]
    assert key == [(m.seq, m.kind, m.culprits, m.reference, m.how_named, m.seen_before) for m in full]
    if how in ("type", "shape", "reshape") and full:
        assert full[0].kind in ("collective_type_mismatch", "size_or_syntax_mismatch")
