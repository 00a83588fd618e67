"""The hang playbook over stored captures: real gloo dumps (hang, op mismatch, healthy, a rank
gloo aborted) and built captures of 2-8 ranks (who is behind, dead, all stuck, healthy mid-step)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import duckdb
import pytest

from playbooks.hang import HangOptions, diagnose_hang
from probes.hang import capture_dumps, write_capture
from probes.hang.frdump import parse_dump
from probes.hang.model import Capture, RankCapture
from probes.hang.stacks import Frame, Stacks, Thread
from tests.support.fr_dumps import dump_bytes
from tests.support.stores import new_store

FIX = Path(__file__).resolve().parents[3] / "fixtures" / "hang"
NOW = 1_800_000_000_000_000_000


@pytest.fixture()
def con(tmp_path: Path) -> duckdb.DuckDBPyConnection:
    c = new_store(tmp_path / "s.duckdb")
    yield c
    c.close()


def _diag(con: duckdb.DuckDBPyConnection, cap: Capture, **opts: Any):
    write_capture(con, cap)
    return diagnose_hang(con, cap.capture_id, HangOptions(**opts))


def test_real_hang_names_rank_1_and_the_stuck_sequence_id(con) -> None:
    d = _diag(con, capture_dumps(FIX / "hang"))
    assert d.verdicts() == ["rank_behind"]
    f = d.findings[0]
    assert "rank 1 never entered collective #19" in f.summary
    ev = {e.name: e for e in f.evidence}
    assert ev["progress_per_rank"].values["stuck_seq"] == 19
    assert ev["progress_per_rank"].values["behind"] == "1"
    assert ev["progress_per_rank"].values["rank1_last_enqueued"] == 18
    # the evidence SQL is rerunnable and gives the same numbers
    rows = con.execute(ev["progress_per_rank"].sql).fetchall()
    assert {(r[2], r[4], r[5]) for r in rows} == {(0, 19, 18), (1, 18, 18)}
    assert con.execute(ev["stuck_collective"].sql).fetchall()[0][:3] == (0, 19, "gloo:all_reduce")


def test_real_op_mismatch_names_the_type_and_rank_1(con) -> None:
    d = _diag(con, capture_dumps(FIX / "mismatch-op"))
    assert d.verdicts() == ["collective_mismatch"]
    f = d.findings[0]
    culprit = {e.name: e for e in f.evidence}["culprit"].values
    assert culprit["mismatch"] == "collective_type_mismatch"
    assert culprit["analyzer_name"] == "COLLECTIVE_TYPE_MISMATCH"
    assert culprit["culprit_ranks"] == "1" and culprit["named_by"] == "novelty_after_2"
    assert "#19" in f.title and "all_gather" in f.summary


def test_real_healthy_dumps_give_no_finding(con) -> None:
    d = _diag(con, capture_dumps(FIX / "healthy"))
    assert d.findings == []
    assert any("completed every collective" in c for c in d.context["order_of_checks"])


def test_rank_gloo_aborted_is_a_member_without_a_dump(con) -> None:
    d = _diag(con, capture_dumps(FIX / "mismatch-size-died"))
    assert d.verdicts() == ["rank_dump_missing"]
    assert "rank 0" in d.findings[0].summary


def _dumps_written(src: Path, dst: Path, after_s: float) -> Path:
    """A copy of a dump folder whose files say they were written `after_s` after the newest
    collective began: a folder's waits run to each file's mtime, and a fresh clone's mtimes
    are the clone's, hours or days after the fixture was captured."""
    shutil.copytree(src, dst)
    newest = max(e.time_created_ns for p in dst.glob("rank_*")
                 for e in parse_dump(p.read_bytes(), p.name).entries)
    at = newest + int(after_s * 1e9)
    for p in dst.iterdir():
        os.utime(p, ns=(at, at))
    return dst


@pytest.mark.parametrize("waited_s", [37.0, 1900.0])
def test_long_min_wait_turns_the_real_hang_into_a_note(con, tmp_path: Path,
                                                       waited_s: float) -> None:
    d = _diag(con, capture_dumps(_dumps_written(FIX / "hang", tmp_path / "hang", waited_s)),
              min_wait_s=3600.0)
    assert d.findings == [] and any("under --min-wait" in n for n in d.notes)


# ---- built captures: N ranks, each a list of collectives -------------------------------

def _stack(rank: int, frames: list[tuple[str, str, int]]) -> Stacks:
    return Stacks("ok", "py-spy", [
        Thread("111", 1, "MainThread", False, False, [Frame("select", "/usr/lib/python3.11/selectors.py", 468)]),
        Thread(f"{7000 + rank}", 2, "step-loop", False, False, [Frame(*f) for f in frames])],
        at_ns=NOW)


def _capture(world: int, per_rank_ops: dict[int, tuple[list, int]], *, waited_s: float,
             dead: tuple[int, ...] = (), stacks: dict[int, list] | None = None) -> Capture:
    cap = Capture(f"hg-test-{world}-{len(per_rank_ops)}", "url", "http://127.0.0.1:1", [],
                  world_size=world)
    for r in range(world):
        rc = RankCapture(r, pid=1000 + r, alive=r not in dead)
        if r in per_rank_ops:
            ops, done = per_rank_ops[r]
            rc.dump = parse_dump(dump_bytes(r, world, ops, done, NOW - int(waited_s * 1e9)), f"rank_{r}")
            rc.dump_status, rc.dumped_at_ns, rc.dump_path = "ok", NOW, f"/tmp/rank_{r}"
        else:
            rc.dump_status, rc.dump_error = "missing", f"/tmp/rank_{r}: no such file"
        if stacks and r in stacks:
            rc.stacks = _stack(r, stacks[r])
        cap.ranks.append(rc)
    return cap


AR = ("all_reduce", [8, 4096], "BFloat16")
BC = ("broadcast", [1], "Long")
WAIT = [("all_reduce", "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", 3252),
        ("wrapper", "/venv/lib/python3.11/site-packages/torch/distributed/c10d_logger.py", 83),
        ("forward", "/srv/engine/tp_layers.py", 141)]
IDLE = [("wait", "/usr/lib/python3.11/threading.py", 327),
        ("get", "/usr/lib/python3.11/queue.py", 171),
        ("next_batch", "/srv/engine/scheduler.py", 58)]


@pytest.mark.parametrize("world, slow, steps", [(4, 2, 5), (8, 7, 2), (3, 0, 9)])
def test_the_rank_behind_among_n(con, world: int, slow: int, steps: int) -> None:
    ops = ([BC] + [AR] * 3) * steps
    per = {r: (ops + [BC, AR], len(ops) + 1) for r in range(world) if r != slow}
    per[slow] = (ops + [BC], len(ops) + 1)
    stacks = {r: WAIT for r in range(world) if r != slow} | {slow: IDLE}
    d = _diag(con, _capture(world, per, waited_s=30.0, stacks=stacks))
    assert d.verdicts() == ["rank_behind"]
    f = d.findings[0]
    stuck = len(ops) + 2
    assert f.title.startswith(f"Rank {slow} is behind: collective #{stuck}")
    waits = {e.name: e for e in f.evidence}["where_each_rank_waits"].values
    assert waits[f"rank{slow}_waits_in"] == "wait (/usr/lib/python3.11/threading.py:327)"
    assert waits[f"rank{slow}_called_from"] == "next_batch (/srv/engine/scheduler.py:58)"
    other = next(r for r in range(world) if r != slow)
    assert waits[f"rank{other}_waits_in"] == "all_reduce (torch/distributed/distributed_c10d.py:3252)"
    assert waits[f"rank{other}_called_from"] == "forward (/srv/engine/tp_layers.py:141)"
    assert waits[f"rank{other}_in_collective"] is True and waits[f"rank{slow}_in_collective"] is False
    assert waits[f"rank{other}_thread"] == "step-loop (flight_recorder_thread)"


def test_a_dead_rank_is_named_and_the_others_wait(con) -> None:
    ops = [BC, AR, AR]
    per = {0: (ops + [BC], 3), 1: (ops + [BC], 3)}
    d = _diag(con, _capture(3, per, waited_s=12.0, dead=(2,)))
    assert "rank_died" in d.verdicts()
    died = next(f for f in d.findings if f.verdict == "rank_died")
    assert died.title == "Rank 2 died" and "#4" in died.summary and died.severity == "critical"


def test_every_rank_in_the_same_collective_is_the_transport(con) -> None:
    ops = [BC, AR, AR, AR]
    per = {r: (ops, 3) for r in range(4)}
    d = _diag(con, _capture(4, per, waited_s=8.0))
    assert d.verdicts() == ["collective_stuck_all_ranks"]
    assert "#4" in d.findings[0].title


@pytest.mark.parametrize("waited_s, min_wait", [(0.002, 1.0), (0.4, 0.5)])
def test_healthy_engine_caught_mid_step_is_no_finding(con, waited_s: float, min_wait: float) -> None:
    ops = [BC, AR, AR, AR]
    per = {0: (ops + [BC, AR], 5), 1: (ops + [BC], 5)}
    d = _diag(con, _capture(2, per, waited_s=waited_s), min_wait_s=min_wait)
    assert d.findings == []
    assert any("in flight" in n for n in d.notes)


def test_same_capture_just_over_min_wait_is_a_hang(con) -> None:
    ops = [BC, AR, AR, AR]
    per = {0: (ops + [BC, AR], 5), 1: (ops + [BC], 5)}
    d = _diag(con, _capture(2, per, waited_s=0.6), min_wait_s=0.5)
    assert d.verdicts() == ["rank_behind"]


def test_unknown_capture_is_a_clear_error(con) -> None:
    with pytest.raises(ValueError, match="no such hang capture"):
        diagnose_hang(con, "hg-nope")


def test_stacks_only_names_the_rank_outside_the_collective(con) -> None:
    cap = _capture(3, {}, waited_s=0.0, stacks={0: WAIT, 1: IDLE, 2: WAIT})
    for rc in cap.ranks:
        rc.dump_status, rc.dump_error = "not_requested", None
    d = _diag(con, cap)
    assert d.verdicts() == ["rank_outside_collective"]
    f = d.findings[0]
    assert f.title.startswith("Rank 1 not in the collective") and f.severity == "warning"
    assert "next_batch (/srv/engine/scheduler.py:58)" in f.summary


def test_stacks_only_all_idle_is_no_finding(con) -> None:
    cap = _capture(2, {}, waited_s=0.0, stacks={0: IDLE, 1: IDLE})
    for rc in cap.ranks:
        rc.dump_status, rc.dump_error = "not_requested", None
    assert _diag(con, cap).findings == []


def test_rank_behind_in_one_group_of_two(con) -> None:
    """A TP group ('1') where rank 3 is behind and a healthy data-parallel group ('0')."""
    ops = [BC, AR, AR]
    cap = _capture(4, {r: (ops, 3) for r in range(4)}, waited_s=20.0)
    for rc in cap.ranks:
        assert rc.dump is not None
        tp = list(rc.dump.entries[:2])  # two more collectives on group 1
        for i, e in enumerate(tp):
            clone = type(e)(**{**e.__dict__, "record_id": 10 + i, "pg_id": 1, "pg_name": "1",
                               "pg_desc": "tp", "collective_seq_id": i + 1,
                               "retired": i != 1, "state": "completed" if i == 0 else "started"})
            if rc.rank == 3 and i == 1:
                continue  # rank 3 never enters the TP group's second collective
            rc.dump.entries.append(clone)
        rc.dump.pg_config["1"] = {"name": "1", "desc": "tp", "ranks": [0, 1, 2, 3]}
    d = _diag(con, cap)
    assert d.verdicts() == ["rank_behind"]
    f = d.findings[0]
    assert f.title.startswith("Rank 3 is behind: collective #2") and "process group 1 (tp)" in f.summary
    assert any("group 0: every rank completed" in c for c in d.context["order_of_checks"])
