"""Reports: the HTML page is self-contained; exports hold exactly one run's rows."""

from __future__ import annotations

import re
from pathlib import Path

import duckdb
import numpy as np

from infbench.report import svg
from infbench.report.export import export_run
from infbench.report.html import build_html
from infbench.store import BatchWriter, create_run, finish_run, get_run, open_store


def _two_runs(tmp_path: Path) -> duckdb.DuckDBPyConnection:
    con = open_store(tmp_path / "s.duckdb")
    for rid in ("r1", "r2"):
        create_run(con, run_id=rid, config={"k": "<b>"}, target_url="u", model="m", endpoint="chat",
                   t0_monotonic_ns=0)
        w = BatchWriter(con, rid)
        w.put("requests", {"request_idx": [0], "label": ["x"], "phase": ["measure"], "send_ns": [0],
                           "first_content_ns": [10], "last_content_ns": [30], "last_chunk_ns": [30],
                           "end_ns": [31], "output_tokens": [3]})
        w.put("chunks", {"request_idx": [0, 0, 0], "seq": [0, 1, 2], "t_ns": [10, 20, 30], "read_idx": [0, 1, 2],
                         "nbytes": [5, 5, 5], "content": [True] * 3, "coalesced": [False] * 3})
        w.close()
        finish_run(con, rid, status="completed", summary={"completed": 1, "p50_ttft_ms": 1e-5})
    return con


def test_html_is_self_contained_and_escapes_config(tmp_path: Path) -> None:
    con = _two_runs(tmp_path)
    page = build_html(con, get_run(con, "r1"))
    assert page.count("<svg") >= 6
    assert not re.search(r"""(src|href)\s*=\s*["']?https?:""", page)
    assert "<script" not in page
    assert "&lt;b&gt;" in page and '"<b>"' not in page


def test_export_writes_one_runs_rows(tmp_path: Path) -> None:
    con = _two_runs(tmp_path)
    files = export_run(con, "r2", tmp_path / "out", "parquet")
    assert {f.name for f in files} >= {"runs.parquet", "requests.parquet", "chunks.parquet"}
    n, runs = duckdb.connect().execute(
        f"SELECT count(*), count(DISTINCT run_id) FROM '{tmp_path / 'out' / 'chunks.parquet'}'").fetchall()[0]
    assert (n, runs) == (3, 1)
    export_run(con, "r1", tmp_path / "csv", "csv")
    assert (tmp_path / "csv" / "requests.csv").read_text().count("\n") == 2


def test_svg_charts_handle_empty_and_constant_data() -> None:
    assert "no data" in svg.histogram(np.array([]), "t", "x")
    assert "<rect" in svg.histogram(np.array([5.0, 5.0, 5.0]), "t", "x")
    assert "<polyline" in svg.lines([("a", np.array([0, 1]), np.array([2, 2]))], "t", "x", "y")
