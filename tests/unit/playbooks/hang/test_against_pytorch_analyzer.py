"""Our verdicts against PyTorch's own flight recorder analyzer (fr_trace's build_db) on the same
dump folders: the bundled engine's hang, built desyncs among 4 and 8 ranks, and a real gloo
op mismatch. PyTorch 2.13's analyzer cannot read its own gloo dumps as written (pg_config is
keyed '' while entries name the group '0': KeyError ('0', 0)); ours reads them."""

from __future__ import annotations

import pickle
import shutil
import time
from pathlib import Path

import pytest

from playbooks.hang import diagnose_hang
from probes.hang import capture_dumps, write_capture
from tests.support.fr_dumps import write_dumps

pytest.importorskip("torch.distributed.flight_recorder.components.builder")
from torch.distributed.flight_recorder.components.builder import build_db  # noqa: E402
from torch.distributed.flight_recorder.components.config_manager import JobConfig  # noqa: E402
from torch.distributed.flight_recorder.components.loader import read_dir  # noqa: E402

from tests.support.stores import new_store

ROOT = Path(__file__).resolve().parents[4]
AR, BC = ("all_reduce", [8, 4096], "BFloat16"), ("broadcast", [1], "Long")


def theirs(folder: Path) -> list[tuple[int, set[int], dict[int, str]]]:
    """(seq, missing ranks, {culprit rank: MatchState name}) of each collective that failed
    (a collective with missing ranks keeps pass_check True there: it is listed too)."""
    args = JobConfig().parse_args([str(folder), "--prefix", "rank_"])
    details, version = read_dir(args)
    db = build_db(details, args, version)
    return [(c.collective_seq_id, set(c.missing_ranks or ()),
             {r: m.type_of_mismatch.state.name for r, m in (c.mismatch_collectives or {}).items()})
            for c in db.collectives if not c.pass_check or c.missing_ranks]


def ours(folder: Path, tmp_path: Path):
    con = new_store(tmp_path / "s.duckdb")
    cap = capture_dumps(folder)
    write_capture(con, cap)
    d = diagnose_hang(con, cap.capture_id)
    con.close()
    return d


def _ev(d, verdict: str, name: str) -> dict:
    f = next(f for f in d.findings if f.verdict == verdict)
    return next(e.values for e in f.evidence if e.name == name)


def test_engine_hang_same_seq_and_missing_rank(tmp_path: Path) -> None:
    folder = ROOT / "examples" / "hang" / "tp2_rank1_hang"
    (seq, missing, errors), = theirs(folder)[:1]
    d = ours(folder, tmp_path)
    progress = _ev(d, "rank_behind", "progress_per_rank")
    assert (progress["stuck_seq"], progress["behind"]) == (seq, ",".join(map(str, sorted(missing))))
    assert (seq, missing) == (21, {1})


@pytest.mark.parametrize("world, slow", [(4, 3), (8, 5)])
def test_rank_behind_among_n_same_as_theirs(tmp_path: Path, world: int, slow: int) -> None:
    ops = [BC, AR, AR] * 6
    per = {r: (ops + [BC, AR], len(ops) + 1) for r in range(world)}
    per[slow] = (ops + [BC], len(ops) + 1)
    folder = write_dumps(tmp_path / "d", world, per, time.time_ns() - 30 * 10**9)
    (seq, missing, _), = theirs(folder)[:1]
    progress = _ev(ours(folder, tmp_path), "rank_behind", "progress_per_rank")
    assert (progress["stuck_seq"], progress["behind"]) == (seq, str(slow))
    assert missing == {slow}


@pytest.mark.parametrize("bad, kind", [
    (("all_reduce", [8, 4096], "Float"), "COLLECTIVE_DTYPE_MISMATCH"),
    (("all_reduce", [8, 4095], "BFloat16"), "SIZE_OR_SYNTAX_MISMATCH"),
    (("all_gather", [8, 4096], "BFloat16"), "COLLECTIVE_TYPE_MISMATCH"),
])
def test_mismatch_among_four_same_type_and_culprit(tmp_path: Path, bad, kind: str) -> None:
    ops = [BC, AR, AR] * 4 + [BC]
    per = {r: (ops + [AR], len(ops)) for r in range(4)}
    per[2] = (ops + [bad], len(ops))
    folder = write_dumps(tmp_path / "d", 4, per, time.time_ns() - 30 * 10**9)
    (seq, _, errors), = theirs(folder)[:1]
    culprit = _ev(ours(folder, tmp_path), "collective_mismatch", "culprit")
    assert errors == {2: kind}
    assert (culprit["analyzer_name"], culprit["culprit_ranks"]) == (kind, "2")


def test_real_gloo_op_mismatch_theirs_needs_its_pg_config_keyed_by_name(tmp_path: Path) -> None:
    folder = tmp_path / "gloo"
    shutil.copytree(ROOT / "tests" / "fixtures" / "hang" / "mismatch-op", folder)
    with pytest.raises(KeyError):
        theirs(folder)  # PyTorch 2.13 on its own gloo dumps
    culprit = _ev(ours(folder, tmp_path), "collective_mismatch", "culprit")
    for f in folder.iterdir():  # rename pg_config's key to the name the entries use
        d = pickle.loads(f.read_bytes())
        d["pg_config"] = {"0": {**d["pg_config"][""], "name": "0", "desc": "default_pg"}}
        f.write_bytes(pickle.dumps(d))
    (seq, _, errors), = theirs(folder)[:1]
    assert (seq, errors) == (19, {1: "COLLECTIVE_TYPE_MISMATCH"})
    assert (culprit["analyzer_name"], culprit["culprit_ranks"]) == ("COLLECTIVE_TYPE_MISMATCH", "1")
