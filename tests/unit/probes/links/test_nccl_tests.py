"""nccl-tests output pasted by users (tests/fixtures/nccl_tests/README.md names each source)
parses into rows with the numbers as printed; garbled input is one line naming the line, and
nothing is stored."""

from __future__ import annotations

from pathlib import Path

import pytest

from probes.links.errors import LinkProbeError
from probes.links.nccl_tests import import_nccl_tests, parse_nccl_tests
from tests.support.stores import new_store

FIX = Path(__file__).resolve().parents[3] / "fixtures" / "nccl_tests"


def parse(name: str, op: str | None = None):
    f = FIX / name
    return parse_nccl_tests(f.read_text(), f, op)


def half(p, size: int, in_place: bool, repeat: int = 0) -> dict:
    (r,) = [r for r in p.rows if r["bytes"] == size and r["in_place"] is in_place and r["repeat"] == repeat]
    return r


def test_every_fixture_has_a_source() -> None:
    readme = (FIX / "README.md").read_text()
    files = sorted(f.name for f in FIX.glob("*.txt"))
    assert len(files) >= 8
    for f in files:
        assert f"`{f}` | https://github.com/" in readme, f


def test_newest_layout_2_18_3() -> None:
    p = parse("all_reduce_2.18.3_nccl-2441.txt")
    assert (p.op, p.ranks) == ("all_reduce", 4)
    assert p.settings["nccl_tests_version"] == "2.18.3" and p.settings["iters"] == 20
    assert p.settings["warmup_iters"] == 1 and p.settings["unalign"] == 0
    assert p.settings["hosts"] == ["gpu-0001", "gpu-0003"]
    o, i = half(p, 500000, False), half(p, 500000, True)
    assert (o["count"], o["dtype"], o["redop"], o["root"]) == (125000, "float", "sum", -1)
    assert (o["time_us"], o["algbw_gbps"], o["busbw_gbps"], o["wrong"]) == (188.69, 2.65, 3.97, 0)
    assert (i["time_us"], i["algbw_gbps"], i["busbw_gbps"], i["wrong"]) == (187.07, 2.67, 4.01, 0)
    assert not [n for n in p.notes if "factor" in n]  # busbw = algbw x 2(n-1)/n holds


def test_all_gather_op_from_the_command_line_and_ranks_from_the_ratio() -> None:
    p = parse("all_gather_bf16_nccl-1435.txt")
    assert (p.op, p.ranks, len(p.rows)) == ("all_gather", 2, 14)
    r = half(p, 117440512, True)
    assert (r["dtype"], r["redop"], r["time_us"], r["algbw_gbps"], r["busbw_gbps"]) == \
        ("bfloat16", "none", 418.7, 280.48, 140.24)


def test_a_value_wider_than_its_column() -> None:
    p = parse("all_gather_2.13.6_nixpkgs-251856.txt")
    assert (p.op, p.ranks) == ("all_gather", 1)
    assert half(p, 33554432, False)["algbw_gbps"] == 1816.16
    assert half(p, 33554432, True)["algbw_gbps"] == 619657.10
    assert half(p, 33554432, True)["time_us"] == 0.05


def test_size_zero_rows_repeat_and_op_from_the_file_name() -> None:
    p = parse("reduce_scatter_nccl-tests-128.txt")
    assert p.op == "reduce_scatter" and p.ranks is None
    assert [r["repeat"] for r in p.rows if r["bytes"] == 0 and not r["in_place"]] == [0, 1, 2, 3, 4]
    assert half(p, 0, False, repeat=1)["time_us"] == 5.92
    assert half(p, 128, True)["algbw_gbps"] == 0.01 and half(p, 128, True)["busbw_gbps"] == 0.0


def test_old_layout_with_error_column_and_footer() -> None:
    p = parse("all_reduce_old_error_nccl-tests-78.txt")
    r = half(p, 536870912, False)
    assert (r["count"], r["root"], r["time_us"], r["busbw_gbps"], r["wrong"], r["error"]) == \
        (134217728, None, 244833, 4.32, None, 2e-06)
    assert p.settings["avg_bus_bandwidth"] == 4.32178
    assert not [n for n in p.notes if "Avg bus bandwidth" in n]  # the rows' mean matches the footer


def test_old_alltoall_rows_leave_redop_blank() -> None:
    p = parse("alltoall_old_error_nccl-tests-78.txt")
    r = half(p, 268435456, True)
    assert (r["op"], r["redop"], r["count"], r["time_us"], r["error"]) == ("alltoall", None, 1048576, 519562, 1.0)


def test_old_broadcast_with_log_lines_and_na() -> None:
    p = parse("broadcast_old_nccl-tests-82.txt")
    assert (p.op, p.ranks) == ("broadcast", 2)
    assert p.settings["iters"] == 100 and p.settings["warmup_iters"] == 10
    r = half(p, 8, False)
    assert (r["root"], r["time_us"], r["wrong"], r["error"], r["redop"]) == (0, 45.82, None, None, None)
    assert any("skipped" in n for n in p.notes)


def test_sendrecv_new_and_old() -> None:
    p = parse("sendrecv_nccl-tests-214.txt")
    assert (p.op, p.ranks, len(p.rows)) == ("sendrecv", 2, 10)
    assert half(p, 4096, True)["wrong"] is None and half(p, 4096, False)["wrong"] == 0
    assert half(p, 4096, False)["time_us"] == 30.74
    q = parse("sendrecv_old_nccl-tests-104.txt")
    r = half(q, 37748744, True)
    assert (q.op, r["dtype"], r["time_us"], r["error"]) == ("sendrecv", "uint8", 11698, 300.0)


def test_nccl_info_lines_inside_the_table_are_skipped() -> None:
    p = parse("all_reduce_info_lines_aws-ofi-nccl-65.txt", op="all_reduce")
    assert p.ranks == 16 and len(p.rows) == 14
    assert half(p, 46137344, True)["busbw_gbps"] == 32.97


@pytest.mark.parametrize(("text", "says"), [
    ("# size count type redop root time algbw busbw #wrong time algbw busbw #wrong\n"
     "  1024  256  float  sum  -1  12.1  0.08  0.15  0  12.0\n", ":2: 10 fields do not fit"),
    ("# size count type redop root time algbw busbw #wrong time algbw busbw #wrong\n"
     "  1024  256  float  sum  -1  12.1  fast  0.15  0  12.0  0.08  0.15  0\n", ":2: 'fast' is not a number"),
    ("# size count type redop root time algbw busbw #wrong time algbw busbw #wrong\n"
     "# (B) (elements)\n  1024  256  float  sum  -1  12.1  0.08  0.15  x  12.0  0.08  0.15  0\n",
     ":3: #wrong 'x' is not a count"),
    ("  1024  256  float  sum  -1  12.1  0.08  0.15  0  12.0  0.08  0.15  0\n", ":1: a table row before"),
    ("# size count colour time algbw busbw #wrong\n", ":1: unknown column(s) 'colour'"),
    ("hello\nworld\n", "no nccl-tests result table"),
    ("", "no nccl-tests result table"),
])
def test_garbled_input_names_the_line(text: str, says: str, tmp_path: Path) -> None:
    f = tmp_path / "all_reduce.txt"
    f.write_text(text)
    with pytest.raises(LinkProbeError, match=says.replace("(", r"\(").replace(")", r"\)")) as e:
        parse_nccl_tests(text, f)
    assert "\n" not in str(e.value)


def test_unknown_op_needs_op(tmp_path: Path) -> None:
    f = tmp_path / "results.txt"
    text = (FIX / "reduce_scatter_nccl-tests-128.txt").read_text()
    with pytest.raises(LinkProbeError, match="pass --op"):
        parse_nccl_tests(text, f)
    assert parse_nccl_tests(text, f, op="reduce_scatter").op == "reduce_scatter"


def test_import_stores_rows_and_a_garbled_file_stores_nothing(tmp_path: Path) -> None:
    con = new_store(tmp_path / "s.duckdb")
    stored, parsed = import_nccl_tests(con, FIX / "all_gather_bf16_nccl-1435.txt")
    rows = con.execute("SELECT count(*), min(ranks), max(busbw_gbps) FROM collectives WHERE probe_id = ?",
                       [stored.probe_id]).fetchone()
    assert rows == (14, 2, 144.59)
    assert con.execute("SELECT source, world_size FROM link_probes").fetchall() == [("nccl-tests", 2)]
    bad = tmp_path / "all_reduce_perf.txt"
    good = (FIX / "all_reduce_2.18.3_nccl-2441.txt").read_text()
    bad.write_text(good + "      600000        150000     float     sum      -1   2\n")
    with pytest.raises(LinkProbeError, match=r"all_reduce_perf.txt:15:"):
        import_nccl_tests(con, bad)
    assert con.execute("SELECT count(*) FROM link_probes").fetchone() == (1,)
    assert con.execute("SELECT count(*) FROM collectives").fetchone() == (14,)
    bin_file = tmp_path / "b.txt"
    bin_file.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(LinkProbeError, match="not text"):
        import_nccl_tests(con, bin_file)
