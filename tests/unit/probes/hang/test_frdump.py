"""Flight Recorder dumps: real ones from PyTorch's own recorder parse; hostile, truncated and
malformed ones are refused with one line, and nothing in them runs."""

from __future__ import annotations

import os
import pickle
import pickletools
from pathlib import Path
from typing import Any

import pytest

from probes.hang import CaptureError, DumpRefused, parse_dump, read_dump

FIX = Path(__file__).resolve().parents[3] / "fixtures" / "hang"


def test_real_gloo_dump_parses_with_every_field() -> None:
    d = read_dump(FIX / "hang" / "rank_0")
    assert d.version == "2.10"
    assert d.pg_status["0"]["last_completed_collective"] == 18
    assert d.pg_status["0"]["last_enqueued_collective"] == 19
    assert d.pg_config[""]["ranks"] == [0, 1]
    last = d.entries[-1]
    assert (last.collective_seq_id, last.backend, last.op) == (19, "gloo", "all_reduce")
    assert last.input_sizes == [[4, 16]] and last.input_dtypes == ["Float"]
    assert last.state == "scheduled" and last.retired is False
    assert last.pg_name == "0" and last.pg_desc == "default_pg"
    assert last.thread_id and last.time_created_ns and last.time_created_ns > 1.6e18
    assert last.frames[0]["name"] == "all_reduce"
    assert [e.record_id for e in d.entries] == sorted(e.record_id for e in d.entries)


def test_real_dump_holds_no_global_so_refusing_globals_costs_nothing() -> None:
    ops = {op.name for op, _, _ in pickletools.genops((FIX / "hang" / "rank_0").read_bytes())}
    assert not ops & {"GLOBAL", "STACK_GLOBAL", "REDUCE", "INST", "OBJ", "NEWOBJ", "BUILD"}


class _RunsCode:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("protocol", [0, 2, pickle.HIGHEST_PROTOCOL])
def test_pickle_that_runs_code_is_refused_before_it_runs(tmp_path: Path, protocol: int) -> None:
    marker = tmp_path / "pwned"
    evil = pickle.dumps(_RunsCode(marker), protocol=protocol)
    with pytest.raises(DumpRefused) as exc:
        parse_dump(evil, "rank_1")
    msg = str(exc.value)
    assert "\n" not in msg and msg.startswith("rank_1: refused")
    assert "system" in msg  # names what it asked for (posix.system / os.system)
    assert not marker.exists()


def test_code_hidden_inside_a_real_looking_dump_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    real = pickle.loads((FIX / "healthy" / "rank_0").read_bytes())
    real["entries"][3]["frames"] = [_RunsCode(marker)]
    with pytest.raises(DumpRefused):
        parse_dump(pickle.dumps(real), "rank_0")
    assert not marker.exists()


def test_builtins_eval_and_persistent_ids_are_refused() -> None:
    payload = b"cbuiltins\neval\n(S'1+1'\ntR."
    with pytest.raises(DumpRefused, match="builtins.eval"):
        parse_dump(payload, "d")

    class P(pickle.Pickler):
        def persistent_id(self, obj: Any) -> Any:
            return "x" if obj == "secret" else None

    import io
    buf = io.BytesIO()
    P(buf).dump({"entries": ["secret"]})
    with pytest.raises(DumpRefused, match="persistent id"):
        parse_dump(buf.getvalue(), "d")


def test_ranks_string_is_parsed_not_evaluated(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    real = pickle.loads((FIX / "healthy" / "rank_0").read_bytes())
    real["pg_config"][""]["ranks"] = f"__import__('os').system('touch {marker}')"
    d = parse_dump(pickle.dumps(real), "rank_0")
    assert d.pg_config[""]["ranks"] is None
    assert not marker.exists()


@pytest.mark.parametrize("cut", [1, 100, -1])
def test_truncated_dump_is_one_clear_line(cut: int) -> None:
    data = (FIX / "hang" / "rank_1").read_bytes()
    with pytest.raises(CaptureError) as exc:
        parse_dump(data[:cut] if cut > 0 else data[:cut], "rank_1")
    assert not isinstance(exc.value, DumpRefused)
    msg = str(exc.value)
    assert msg.startswith("rank_1: not a Flight Recorder dump") and "\n" not in msg


@pytest.mark.parametrize("data, words", [
    (b"", "empty"),
    (b"\x00\xffgarbage not a pickle at all", "unreadable pickle"),
    (pickle.dumps([1, 2, 3]), "holds a list"),
    (pickle.dumps({"version": "2.10"}), "no list of entries"),
    (pickle.dumps({"entries": [{"record_id": 0}]}), "no collective_seq_id"),
    (pickle.dumps({"entries": [{"record_id": 0, "collective_seq_id": "1", "profiling_name": "gloo:x",
                                "state": "scheduled", "process_group": ("0", ""),
                                "input_sizes": [], "output_sizes": [], "input_dtypes": [],
                                "output_dtypes": []}]}), "not an integer"),
    (pickle.dumps({"entries": [{"record_id": 0, "collective_seq_id": 1, "profiling_name": "gloo:x",
                                "state": "exploded", "process_group": ("0", ""),
                                "input_sizes": [], "output_sizes": [], "input_dtypes": [],
                                "output_dtypes": []}]}), "state 'exploded'"),
])
def test_malformed_dumps_name_what_is_wrong(data: bytes, words: str) -> None:
    with pytest.raises(CaptureError, match=words):
        parse_dump(data, "f")


def test_unreadable_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(CaptureError, match="cannot read it"):
        read_dump(tmp_path / "nope")
