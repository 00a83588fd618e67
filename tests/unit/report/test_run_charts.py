"""The run report's charts from a stored run: one unit per axis (requests beside KV cache in %,
preemptions on their own), stalls kept when steps are thinned, the timeline's two kinds of dot."""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np

from infbench.report.run_charts import run_charts
from infbench.store import BatchWriter, create_run, finish_run, get_run
from tests.support.stores import new_store

S = 1_000_000_000


def _run(tmp_path: Path, steps: int = 5000) -> duckdb.DuckDBPyConnection:
    con = new_store(tmp_path / "s.duckdb")
    create_run(con, run_id="r", config={}, target_url="u", model="m", endpoint="chat", t0_monotonic_ns=0)
    w = BatchWriter(con, "r")
    n = 4
    w.put("requests", {"request_idx": list(range(n)), "phase": ["measure"] * n, "send_ns": [0, 0, S, S],
                       "first_content_ns": [S // 10] * n, "last_content_ns": [2 * S] * n,
                       "last_chunk_ns": [2 * S, 2 * S, 3 * S, 3 * S], "end_ns": [2 * S, 2 * S, 3 * S, 3 * S],
                       "output_tokens": [10] * n})
    w.put("chunks", {"request_idx": [0, 0, 1, 1], "seq": [0, 1, 0, 1], "t_ns": [S // 10, S // 5, S // 10, S // 5],
                     "read_idx": [0, 0, 0, 1], "nbytes": [5] * 4, "content": [True] * 4,
                     "coalesced": [False, True, False, False]})
    t = [0, S, 2 * S]
    samples = {"t_ns": t * 3, "source": ["metrics"] * 9,
               "name": ["vllm:num_requests_running"] * 3 + ["vllm:kv_cache_usage_perc"] * 3
               + ["vllm:num_preemptions_total"] * 3,
               "labels": [""] * 9, "value": [2, 4, 1, 0.25, 0.5, 0.125, 0, 0, 3]}
    w.put("metric_samples", samples)
    start = np.arange(steps) * 0.006
    dur = np.full(steps, 0.006)
    dur[3333] = 0.25  # one stall
    w.put("engine_steps", {"step_id": list(range(steps)), "start_s": start.tolist(),
                           "end_s": (start + dur).tolist(), "prefill_tokens": [0] * steps,
                           "decode_seqs": [2] * steps, "num_running": [2] * steps})
    w.close()
    finish_run(con, "r", status="completed", summary={"completed": n, "p50_ttft_ms": 100.0, "p99_ttft_ms": None})
    return con


def _by_title(con: duckdb.DuckDBPyConnection) -> dict[str, dict]:
    return {c.title: c.spec(c.title) for c in run_charts(con, get_run(con, "r"))}


def test_server_gauges_in_requests_and_percent_on_two_axes_preemptions_apart(tmp_path: Path) -> None:
    charts = _by_title(_run(tmp_path))
    srv = charts["Server queue and KV cache (scraped /metrics)"]
    assert [(a["label"], a["unit"]) for a in srv["y"]] == [("requests", "requests"), ("KV cache used", "%")]
    series = {s["name"]: s for s in srv["series"]}
    assert series["running"]["axis"] == 0 and series["KV cache used"]["axis"] == 1
    kv = srv["data"][1 + srv["series"].index(series["KV cache used"])]
    assert kv == [25.0, 50.0, 12.5]  # a 0-1 fraction drawn as %
    pre = charts["Preemptions since the server started (scraped /metrics)"]
    assert [a["unit"] for a in pre["y"]] == ["preemptions"] and pre["data"][1] == [0.0, 0.0, 3.0]


def test_every_axis_has_a_unit_and_at_most_two_per_chart(tmp_path: Path) -> None:
    charts = _by_title(_run(tmp_path))
    assert len(charts) >= 10
    for title, spec in charts.items():
        if "data" not in spec:
            continue
        assert spec["x"]["unit"], title
        assert 1 <= len(spec["y"]) <= 2 and all(a["unit"] for a in spec["y"]), title
    thr = charts["Throughput over time"]
    assert [a["unit"] for a in thr["y"]] == ["requests/s", "tokens/s"]
    assert thr["data"][0] == [2.0, 3.0] and thr["data"][1] == [2.0, 2.0] and thr["data"][2] == [20.0, 20.0]


def test_thinned_engine_steps_keep_the_stall(tmp_path: Path) -> None:
    con = _run(tmp_path)
    chart = next(c for c in run_charts(con, get_run(con, "r")) if c.title.startswith("Engine steps"))
    steps = chart.spec("steps")
    assert len(steps["data"][0]) <= 4000 and max(v for v in steps["data"][1] if v is not None) == 250.0
    assert "5,000 steps" in chart.note


def test_timeline_splits_own_and_shared_reads_and_marks_percentiles(tmp_path: Path) -> None:
    charts = _by_title(_run(tmp_path))
    tl = charts["Token arrival timeline"]
    assert [s["name"] for s in tl["series"]] == ["own read", "shared a read"]
    assert sum(v is not None for v in tl["data"][2]) == 1
    ttft = charts["TTFT distribution"]
    assert [m["label"] for m in ttft["marks"]] == ["p50 100 ms"]
