"""The summary per tenant and per adapter: numbers recomputed from the rows, no section for a
run without them, names shown literally in the terminal and escaped in HTML."""

from __future__ import annotations

import io
from pathlib import Path

import duckdb
import numpy as np
import pytest
from rich.console import Console

from infbench.loadgen.summary import summarize
from infbench.loadgen.tenant_summary import by_group, group_sql
from infbench.report.tenants_view import html_tables, terminal_tables
from infbench.store import BatchWriter, ColumnBuffer, create_run
from tests.support.stores import new_store


def _store(tmp: Path, rows: list[tuple[str | None, str | None, float, int, str | None]]) -> duckdb.DuckDBPyConnection:
    con = new_store(tmp / "s.duckdb")
    create_run(con, run_id="r", config={}, target_url="http://127.0.0.1:1", model="m",
               endpoint="completions", t0_monotonic_ns=0)
    w = BatchWriter(con, "r")
    buf = ColumnBuffer("requests")
    for i, (tenant, adapter, ttft_ms, out, err) in enumerate(rows):
        send = i * 1_000_000
        first = send + int(ttft_ms * 1e6)
        buf.append({"request_idx": i, "label": "x", "phase": "measure", "intended_send_ns": send,
                    "send_ns": send, "first_content_ns": first, "last_choices_ns": first + out * 2_000_000,
                    "last_chunk_ns": first + out * 2_000_000, "end_ns": first + out * 2_000_000,
                    "status_code": 200 if err is None else 500, "error_class": err,
                    "prompt_tokens": 100 + i, "max_tokens": out, "output_tokens": out if err is None else 0,
                    "tenant": tenant, "adapter": adapter})
    w.put_buffer(buf)
    w.close()
    return con


@pytest.mark.parametrize("seed", [0, 1])
def test_groups_recomputed_from_the_rows(tmp_path: Path, seed: int) -> None:
    rng = np.random.default_rng(seed)
    tenants, adapters = ["docs", "chat", None], ["sql", None]
    rows = []
    for _ in range(60):
        err = "http_500" if rng.random() < 0.1 else None
        rows.append((tenants[rng.integers(3)], adapters[rng.integers(2)], float(rng.uniform(5, 500)),
                     int(rng.integers(2, 40)), err))
    con = _store(tmp_path, rows)
    got = by_group(con, "r", "tenant")
    assert set(got) == {"docs", "chat", "(none)"}
    for name, key in (("docs", "docs"), ("(none)", None)):
        mine = [r for r in rows if r[0] == key]
        ok = [r for r in mine if r[4] is None]
        g = got[name]
        assert (g["requests"], g["completed"], g["failed"]) == (len(mine), len(ok), len(mine) - len(ok))
        assert g["median_ttft_ms"] == pytest.approx(np.median([r[2] for r in ok]), abs=1e-3)
        assert g["p99_ttft_ms"] == pytest.approx(np.quantile([r[2] for r in ok], 0.99), abs=1e-3)
        assert g["median_tpot_ms"] == pytest.approx(np.median([2.0 * r[3] / (r[3] - 1) for r in ok]))
        assert g["total_output_tokens"] == sum(r[3] for r in ok)
        assert g["share"] == pytest.approx(len(mine) / 60)
    s = summarize(con, "r")
    assert set(s["by_adapter"]) == {"sql", "base"} and s["by_tenant"] == got
    assert "$run_id" in group_sql("adapter")  # the SQL a reader reruns


def test_a_run_without_tenants_or_adapters_has_no_section(tmp_path: Path) -> None:
    con = _store(tmp_path, [(None, None, 10.0, 5, None)] * 3)
    s = summarize(con, "r")
    assert "by_tenant" not in s and "by_adapter" not in s
    assert terminal_tables(s) == [] and html_tables(s) == ""
    (tmp_path / "b").mkdir()
    adapters_only = summarize(_store(tmp_path / "b", [(None, "sql", 10.0, 5, None)]), "r")
    assert "by_tenant" not in adapters_only and set(adapters_only["by_adapter"]) == {"sql"}


def test_names_are_literal_in_the_terminal_and_escaped_in_html(tmp_path: Path) -> None:
    con = _store(tmp_path, [("[bold]t[/bold]", "<script>x</script>", 10.0, 5, None),
                            ("ok", None, 20.0, 5, None)])
    s = summarize(con, "r")
    out = io.StringIO()
    console = Console(file=out, width=200, markup=True)
    for t in terminal_tables(s):
        console.print(t)
    assert "[bold]t[/bold]" in out.getvalue()
    page = html_tables(s)
    assert "<script>" not in page and "&lt;script&gt;" in page and "By adapter" in page
