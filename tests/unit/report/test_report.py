"""Reports: the HTML page is self-contained; exports hold exactly one run's rows."""

from __future__ import annotations

import json
import re
from pathlib import Path

import duckdb

from infbench.report.html import build_html
from infbench.store import BatchWriter, create_run, finish_run, get_run
from infbench.store.transfer import export_run
from tests.support.stores import new_store


def _two_runs(tmp_path: Path) -> duckdb.DuckDBPyConnection:
    con = new_store(tmp_path / "s.duckdb")
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


def _chart_specs(page: str) -> list[dict]:
    m = re.search(r"<script type='application/json' id='chart-data'>(.*?)</script>", page, re.S)
    assert m, "the page carries its charts' data"
    return json.loads(m.group(1))


def test_html_is_self_contained_and_escapes_config(tmp_path: Path) -> None:
    con = _two_runs(tmp_path)
    page = build_html(con, get_run(con, "r1"))
    # Every chart with data is in the page's JSON; the code that draws them is inline.
    titles = [c["title"] for c in _chart_specs(page)]
    assert {"Token arrival timeline", "Throughput over time", "Requests in flight"} <= set(titles)
    assert page.count("<figure class='chart") >= 9 and "uPlot" in page
    assert not re.search(r"""(src|href)\s*=|<link|@import|url\(""", page), "loads nothing from outside"
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


def test_reports_show_spread_and_raw_itl_and_the_tail(tmp_path: Path) -> None:
    """Tokens 8 ms apart read two at a time, usage/[DONE] 300 ms late: both reports give ITL
    8 ms (raw per-event median 0 ms beside it), the tail and its warning."""
    import io

    from rich.console import Console

    from infbench.loadgen.summary import summarize
    from infbench.report.terminal import print_summary

    ms = 1_000_000
    con = new_store(tmp_path / "s.duckdb")
    create_run(con, run_id="r", config={}, target_url="u", model="m", endpoint="chat", t0_monotonic_ns=0)
    w = BatchWriter(con, "r")
    sent = [20 * ms + 8 * ms * k for k in range(10)]
    stamps = [sent[k | 1] for k in range(10)]  # reads of two: each at its second token's arrival
    w.put("requests", {"request_idx": [0], "phase": ["measure"], "send_ns": [0], "first_content_ns": [stamps[0]],
                       "last_content_ns": [stamps[-1]], "last_choices_ns": [stamps[-1]],
                       "usage_ns": [stamps[-1] + 300 * ms], "done_ns": [stamps[-1] + 300 * ms],
                       "end_ns": [stamps[-1] + 301 * ms], "output_tokens": [10], "num_chunks": [12],
                       "num_content_chunks": [10], "coalesced_chunks": [5]})
    w.put("chunks", {"request_idx": [0] * 10, "seq": list(range(10)), "t_ns": stamps,
                     "read_idx": [k // 2 for k in range(10)], "nbytes": [5] * 10, "content": [True] * 10,
                     "coalesced": [k % 2 == 1 for k in range(10)]})
    w.close()
    s = summarize(con, "r")
    finish_run(con, "r", status="completed", summary=s)
    page = build_html(con, get_run(con, "r"))
    assert re.search(r"<td>ITL</td><td>8\.00</td><td>8\.00</td>", page)
    assert re.search(r"<td>ITL per event \(raw, 0 inside a read\)</td><td>[\d.]+</td><td>0\.00</td>", page)
    assert "<td>usage/[DONE] after the last choices event</td><td>300.00</td>" in page
    assert "50.0% of tokens shared a socket read" in page and "typically arrived 300.0 ms" in page
    buf = io.StringIO()
    print_summary(Console(file=buf, width=80), s)
    text = buf.getvalue()
    assert re.search(r"ITL\s+8\.00\s+8\.00", text) and re.search(r"ITL raw\s+[\d.]+\s+0\.00", text)
    assert re.search(r"Tail\s+300\.0\s+300\.0\s", text) and "typically arrived 300.0 ms" in text
    assert max(map(len, text.splitlines())) <= 80
