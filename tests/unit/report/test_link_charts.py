"""Link probe charts read only the store: busbw by size per op (an import's halves apart), the
pair bars, and the run report shows the probes linked to the run."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from infbench.report.link_charts import links_page, probe_charts, run_link_charts
from infbench.store import create_run
from probes.links.nccl_tests import import_nccl_tests
from probes.links.storage import save_probe
from tests.support.stores import new_store

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "nccl_tests"


def test_imported_probe_plots_each_half_by_size(tmp_path: Path) -> None:
    con = new_store(tmp_path / "s.duckdb")
    stored, _ = import_nccl_tests(con, FIX / "all_gather_bf16_nccl-1435.txt")
    (chart,) = probe_charts(con, stored.probe_id)
    names = [s.name for s in chart.series]
    assert names == ["all_gather (out-of-place)", "all_gather (in-place)"]
    out = chart.series[0]
    assert out.x[0] == 16777216 / 1024 and np.isclose(out.y[0], 77.10)
    assert chart.x.log and chart.x.unit == "KiB" and chart.y[0].unit == "GB/s"
    assert "nccl-tests output" in chart.title


def test_measured_probe_with_pairs_linked_to_a_run(tmp_path: Path) -> None:
    con = new_store(tmp_path / "s.duckdb")
    create_run(con, run_id="r1", config={}, target_url="", model="", endpoint="", t0_monotonic_ns=0)
    rows = [{"phase": "sweep", "op": "all_reduce", "bytes": b, "ranks": 4, "in_place": True, "repeat": rep,
             "time_us": t, "busbw_gbps": bw} for b, rep, t, bw in
            ((65536, 0, 100.0, 1.0), (65536, 1, 90.0, 3.0), (1 << 20, 0, 500.0, 2.0))]
    rows += [{"phase": "pairwise", "op": "sendrecv", "bytes": 1 << 20, "ranks": 2, "src_rank": a, "dst_rank": b,
              "in_place": False, "repeat": 0, "time_us": 10.0, "busbw_gbps": float(a + b)}
             for a, b in ((0, 1), (0, 2), (1, 2))]
    stored = save_probe(con, source="infbench", rows=rows, config={}, backend="gloo", world_size=4,
                        verdict={"bisect": {"status": "slow_rank", "message": "rank <2> is slow"}}, run="r1")
    charts = run_link_charts(con, "r1")
    assert len(charts) == 2
    (s,) = charts[0].series
    assert s.name == "all_reduce" and list(s.x) == [64.0, 1024.0] and list(s.y) == [2.0, 2.0]  # medians
    assert charts[1].point_names == ["0-1", "0-2", "1-2"] and list(charts[1].series[0].y) == [1.0, 2.0, 3.0]
    page = links_page(con, stored.probe_id)
    assert "rank &lt;2&gt; is slow" in page and "<script" in page
    assert run_link_charts(con, "other") == []
