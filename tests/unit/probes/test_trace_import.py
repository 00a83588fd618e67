"""Importing real traces (Kineto JSON, plain/gzipped, single file and rank directory; Nsight
Systems SQLite, old schema and a newer one built from it) and refusing broken files."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import duckdb
import pytest

from probes.traces import TraceError, import_trace
from tests.support.stores import new_store
from tests.unit.probes.nsys_synth import make_new_schema
from tests.unit.probes.traces_support import ALEXNET, NCCL2, SAMPLED, TWO_RANKS, nsys_sqlite


@pytest.fixture
def con(tmp_path: Path) -> duckdb.DuckDBPyConnection:
    c = new_store(tmp_path / "s.duckdb")
    yield c
    c.close()


def _count(con: duckdb.DuckDBPyConnection, table: str, trace_id: str, where: str = "true") -> int:
    return con.execute(f"SELECT count(*) FROM {table} WHERE trace_id = ? AND {where}",
                       [trace_id]).fetchone()[0]


def test_kineto_file_lands_in_every_table_with_exact_times(con) -> None:
    t = import_trace(con, SAMPLED)
    assert (t.source, t.ranks, t.events) == ("kineto", [0], 4855)
    # The fixture's own counts (README): 1154 kernels + 40 memcpy + 10 memset on GPU streams.
    assert t.counts == {"trace_gpu_ops": 1204, "trace_api_calls": 1204, "trace_cpu_ops": 2329,
                        "trace_annotations": 73, "trace_collectives": 10}
    rows = dict(con.execute("SELECT kind, count(*) FROM trace_gpu_ops GROUP BY 1").fetchall())
    assert rows == {"kernel": 1154, "memcpy": 40, "memset": 10}
    # Integer microseconds since the epoch become exact nanoseconds (no float rounding).
    first = con.execute("SELECT start_ns, end_ns, stream, correlation FROM trace_gpu_ops "
                        "WHERE name LIKE 'void fbgemm_gpu::permute_2D_lengths_kernel%' "
                        "ORDER BY start_ns LIMIT 1").fetchone()
    assert first == (1682725898082228000, 1682725898082238000, 23, 6935929)
    # every kernel's launch is in the trace: correlation joins GPU ops to runtime calls
    unmatched = con.execute("""SELECT count(*) FROM trace_gpu_ops g ANTI JOIN trace_api_calls a
                               USING (trace_id, rank, correlation)""").fetchone()[0]
    assert unmatched == 0
    rank = con.execute("SELECT world_size, round_to_us FROM trace_ranks").fetchone()
    assert rank == (128, False)


def test_fractional_microseconds_and_collective_sizes(con) -> None:
    t = import_trace(con, NCCL2)
    ts = con.execute("SELECT start_ns, end_ns FROM trace_cpu_ops WHERE event_id = 0").fetchone()
    assert ts == (4458676522690655, 4458676522690655 + 156777)  # "ts": ...690.655, "dur": 156.777
    r = con.execute("SELECT epoch_offset_ns, round_to_us, world_size FROM trace_ranks").fetchone()
    assert r == (1711964646000000000, True, 2)
    c = con.execute("""SELECT op, algorithm, protocol, dtype, in_elements, message_bytes, group_size
                       FROM trace_collectives WHERE trace_id = ? ORDER BY start_ns LIMIT 1""",
                    [t.trace_id]).fetchone()
    assert c[0] in ("allreduce", "broadcast") and c[1] == "RING" and c[2] == "LL"
    assert c[3] == "Float" and c[5] == c[4] * 4 and c[6] == 2
    meta = json.loads(con.execute("SELECT metadata FROM trace_ranks").fetchone()[0])
    assert "INFO" in meta and meta["events_not_imported"]["ac2g"] == 8652 + 3862


def test_plain_json_and_gzip_give_the_same_rows(con, tmp_path: Path) -> None:
    plain = tmp_path / "alexnet.json"
    with gzip.open(ALEXNET, "rb") as src, plain.open("wb") as dst:
        shutil.copyfileobj(src, dst)
    a, b = import_trace(con, ALEXNET), import_trace(con, plain)
    assert a.counts == b.counts and a.counts["trace_gpu_ops"] == 139
    q = "SELECT list(event_id ORDER BY event_id), sum(end_ns - start_ns) FROM trace_gpu_ops WHERE trace_id = ?"
    assert con.execute(q, [a.trace_id]).fetchone() == con.execute(q, [b.trace_id]).fetchone()
    assert _count(con, "trace_gpu_ops", a.trace_id, "kind = 'sync'") == 41


def test_rank_directory(con) -> None:
    t = import_trace(con, TWO_RANKS)
    assert t.ranks == [0, 1]
    per = dict(con.execute("SELECT rank, count(*) FROM trace_gpu_ops GROUP BY 1").fetchall())
    assert per == {0: 1204, 1: 1154}


def test_chrome_array_format_and_linking_a_run(con, tmp_path: Path) -> None:
    con.execute("INSERT INTO runs (run_id, created_at, status) VALUES ('r1', now(), 'completed')")
    events = json.loads(gzip.decompress(ALEXNET.read_bytes()))["traceEvents"]
    arr = tmp_path / "array.json"
    arr.write_text(json.dumps(events))
    t = import_trace(con, arr, run="last")
    assert t.run_id == "r1" and t.counts["trace_gpu_ops"] == 139
    assert con.execute("SELECT run_id FROM traces").fetchone()[0] == "r1"


def test_nsys_old_schema(con, tmp_path: Path) -> None:
    t = import_trace(con, nsys_sqlite(tmp_path))
    assert (t.source, t.ranks) == ("nsys", [0])
    kinds = dict(con.execute("SELECT kind, count(*) FROM trace_gpu_ops GROUP BY 1").fetchall())
    assert kinds == {"kernel": 5, "memcpy": 15}
    assert t.counts["trace_api_calls"] == 95 and t.counts["trace_annotations"] == 22
    # StringIds resolved, enums from CUPTI's values (this schema has no ENUM tables)
    names = {r[0] for r in con.execute("SELECT DISTINCT name FROM trace_gpu_ops").fetchall()}
    assert "saxpy(double *, double *, double *, double, int)" in names
    assert "Memcpy HtoD (Pageable -> Device)" in names
    # NVTX: literal text and registered strings; domain from the domain-create event
    nvtx = con.execute("SELECT count(*), count(DISTINCT name), any_value(domain) FROM "
                       "trace_annotations WHERE kind = 'nvtx_range'").fetchone()
    assert nvtx[0] == 22 and nvtx[2] == "MPI"
    # Nsight records the launch twice, nested: cudaLaunchKernel and its cudaLaunchKernel_v7000.
    launch = con.execute("""SELECT count(*), count(DISTINCT g.event_id), list(DISTINCT a.name)
                            FROM trace_gpu_ops g JOIN trace_api_calls a
                            USING (trace_id, rank, correlation) WHERE g.kind = 'kernel'""").fetchone()
    assert launch[:2] == (10, 5) and sorted(launch[2]) == ["cudaLaunchKernel", "cudaLaunchKernel_v7000"]
    fmt = con.execute("SELECT format_version, producer, notes FROM traces").fetchone()
    assert fmt[0] == "2.9.1" and "2022.2.1.31" in fmt[1] and fmt[2] is None  # tables all there
    assert con.execute("SELECT epoch_offset_ns FROM trace_ranks").fetchone()[0] == 1687813257637297504


def test_nsys_newer_schema_with_enums_and_no_nvtx(con, tmp_path: Path) -> None:
    new = make_new_schema(nsys_sqlite(tmp_path), tmp_path / "new.sqlite")
    t = import_trace(con, new)
    kinds = dict(con.execute("SELECT kind, count(*) FROM trace_gpu_ops GROUP BY 1").fetchall())
    assert kinds == {"kernel": 5, "memcpy": 15, "sync": 5}
    assert {r[0] for r in con.execute("SELECT DISTINCT name FROM trace_gpu_ops WHERE kind = 'sync'").fetchall()} == {"Stream Wait Event"}
    assert t.counts["trace_annotations"] == 0
    fmt, notes = con.execute("SELECT format_version, notes FROM traces").fetchone()
    assert fmt == "3.13.2" and "NVTX_EVENTS" in notes


def _broken(tmp_path: Path) -> dict[str, Path]:
    raw = gzip.decompress(SAMPLED.read_bytes())
    files = {"empty": b"", "random": bytes(range(256)) * 4, "truncated_json": raw[: len(raw) // 2],
             "truncated_gzip": gzip.compress(raw)[:20000], "not_a_trace": b'{"a": 1}',
             "bad_event": raw.replace(b'"ph": "X"', b'"ph": X', 1),
             "corrupt_sqlite": b"SQLite format 3\x00" + b"\x00\x10" + bytes(5000)}
    out = {}
    for name, data in files.items():
        p = tmp_path / f"{name}.json"
        p.write_bytes(data)
        out[name] = p
    return out


@pytest.mark.parametrize("name", ["empty", "random", "truncated_json", "truncated_gzip",
                                  "not_a_trace", "bad_event", "corrupt_sqlite"])
def test_broken_files_get_one_line_and_leave_the_store_as_it_was(con, tmp_path: Path, name: str) -> None:
    path = _broken(tmp_path)[name]
    with pytest.raises(TraceError) as err:
        import_trace(con, path)
    msg = str(err.value)
    assert "\n" not in msg and str(path) in msg
    assert con.execute("SELECT count(*) FROM traces").fetchone()[0] == 0
    assert con.execute("SELECT count(*) FROM trace_gpu_ops").fetchone()[0] == 0


def test_missing_path_and_empty_directory(con, tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="no such file"):
        import_trace(con, tmp_path / "nope.json")
    (tmp_path / "d").mkdir()
    with pytest.raises(TraceError, match="no trace files"):
        import_trace(con, tmp_path / "d")
    with pytest.raises(TraceError, match="run 'x'|no run|not"):
        import_trace(con, SAMPLED, run="x")


def test_a_list_of_objects_after_the_events_is_not_taken_for_them(con, tmp_path: Path) -> None:
    doc = json.loads(gzip.decompress(ALEXNET.read_bytes()))
    events = doc.pop("traceEvents")
    text = json.dumps({**doc, "traceEvents": events, "later": [{"a": 1}, {"b": [2]}], "INFO": ["x]"]})
    p = tmp_path / "after.json"
    p.write_text(text)
    t = import_trace(con, p)
    assert t.counts["trace_gpu_ops"] == 139 and t.events == len(events)
    meta = json.loads(con.execute("SELECT metadata FROM trace_ranks").fetchone()[0])
    assert meta["later"] == [{"a": 1}, {"b": [2]}]


def test_nsys_nvtx_event_types_come_from_the_enum_table_when_present(con, tmp_path: Path) -> None:
    new = make_new_schema(nsys_sqlite(tmp_path), tmp_path / "enum.sqlite", nvtx_type_offset=1000)
    t = import_trace(con, new)
    nvtx = con.execute("SELECT count(*), any_value(domain) FROM trace_annotations "
                       "WHERE trace_id = ? AND kind = 'nvtx_range'", [t.trace_id]).fetchone()
    assert nvtx == (22, "MPI")
