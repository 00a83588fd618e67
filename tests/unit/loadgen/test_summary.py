"""Summary numbers from hand-made rows whose answers are known."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from infbench.loadgen.summary import mark_cooldown, summarize
from infbench.store import BatchWriter, create_run
from tests.support.stores import new_store

MS = 1_000_000


def _store(tmp_path: Path) -> duckdb.DuckDBPyConnection:
    """Two good requests (5 content chunks, 10 ms apart) and one http_500; intended send 2 ms early.
    Request b's last two chunks came in one read, stamped with its arrival (the last one's)."""
    con = new_store(tmp_path / "s.duckdb")
    create_run(con, run_id="r", config={}, target_url="u", model="m", endpoint="completions", t0_monotonic_ns=0)
    w = BatchWriter(con, "r")
    req: dict[str, list] = {k: [] for k in ("request_idx", "label", "phase", "intended_send_ns", "send_ns",
                                            "first_content_ns", "last_content_ns", "last_chunk_ns", "end_ns",
                                            "error_class", "prompt_tokens", "output_tokens",
                                            "output_tokens_source", "num_content_chunks", "coalesced_chunks")}
    chunks: dict[str, list] = {k: [] for k in ("request_idx", "seq", "t_ns", "read_idx", "nbytes", "content", "coalesced")}
    for i, (label, ttft) in enumerate((("a", 100), ("b", 300))):
        send = i * 1000 * MS
        ts = [send + ttft * MS + k * 10 * MS for k in range(5)]
        for col, v in zip(req, (i, label, "measure", send - 2 * MS, send, ts[0], ts[-1], ts[-1], ts[-1] + MS,
                                None, 50, 5, "usage", 5, 1 if i else 0), strict=True):
            req[col].append(v)
        for k, t in enumerate(ts):
            shared = i == 1 and k >= 3  # b: chunks 3 and 4 in read 3, at chunk 4's time
            for col, v in zip(chunks, (i, k, ts[4] if shared else t, 3 if shared else k, 10, True,
                                       bool(shared and k == 4)), strict=True):
                chunks[col].append(v)
    for col, v in zip(req, (2, "a", "measure", 2000 * MS, 2000 * MS, None, None, None, 2001 * MS,
                            "http_500", None, 0, None, 0, 0), strict=True):
        req[col].append(v)
    w.put("requests", req)
    w.put("chunks", chunks)
    w.close()
    return con


def test_latencies_throughput_and_errors(tmp_path: Path) -> None:
    con = _store(tmp_path)
    s = summarize(con, "r")
    assert (s["completed"], s["failed"], s["errors"]) == (2, 1, {"http_500": 1})
    assert s["mean_ttft_ms"] == pytest.approx(200.0)
    assert s["mean_ttft_intended_ms"] == pytest.approx(202.0)
    assert s["median_tpot_ms"] == pytest.approx(10.0)
    # Spread: b's read of two chunks 20 ms after the previous one is 10 ms per chunk, as the
    # server sent them; per event it is 20 ms and 0 ms.
    assert s["mean_itl_ms"] == pytest.approx(10.0) and s["p99_itl_ms"] == pytest.approx(10.0)
    assert s["raw_max_itl_ms"] == pytest.approx(20.0) and s["raw_mean_itl_ms"] == pytest.approx(10.0)
    assert s["raw_p50_itl_ms"] == pytest.approx(10.0) and s["max_itl_ms"] == pytest.approx(10.0)
    assert s["mean_e2el_ms"] == pytest.approx(240.0)
    assert s["duration"] == pytest.approx(2.001)
    assert s["total_output_tokens"] == 10 and s["total_input_tokens"] == 100
    assert s["request_throughput"] == pytest.approx(2 / 2.001)
    assert s["coalesced_chunks"] == 1 and s["coalesced_fraction"] == pytest.approx(0.1)
    assert any("same socket read" in w for w in s["warnings"])
    assert set(s["by_label"]) == {"a", "b"} and s["by_label"]["a"]["requests"] == 2
    assert "p99.9_ttft_ms" in s  # vLLM's key spelling for fractional percentiles


def test_goodput_uses_intended_send(tmp_path: Path) -> None:
    con = _store(tmp_path)
    assert summarize(con, "r", {"ttft": 101.0})["good_requests"] == 0  # 100 ms + 2 ms late schedule
    s = summarize(con, "r", {"ttft": 102.5, "tpot": 10.0})
    assert s["good_requests"] == 1 and s["request_goodput"] == pytest.approx(1 / 2.001)


def test_cooldown_excludes_the_tail(tmp_path: Path) -> None:
    con = _store(tmp_path)
    mark_cooldown(con, "r", last_send_ns=2000 * MS, cooldown_s=1.5)
    s = summarize(con, "r")
    assert s["num_prompts"] == 1 and s["excluded_warmup_cooldown"] == 2
