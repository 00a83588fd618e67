"""Summary figures where reads coalesce and where usage/[DONE] come late (hand-made rows)."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from infbench.loadgen import summary
from infbench.store import BatchWriter, create_run
from tests.support.stores import new_store

MS = 1_000_000


def _store(tmp_path: Path, tails_ms: list[float], itl_ms: float, per_read: int, tokens: int = 12,
           ttft_ms: float = 16.0) -> duckdb.DuckDBPyConnection:
    """One request per tail: tokens every `itl_ms` from `ttft_ms`, the finish event with the
    last one, usage and [DONE] `tail` ms later; the client read `per_read` tokens at a time
    (each read stamped with its last token's arrival, as kernel stamps are)."""
    con = new_store(tmp_path / "s.duckdb")
    create_run(con, run_id="r", config={}, target_url="u", model="m", endpoint="completions", t0_monotonic_ns=0)
    w = BatchWriter(con, "r")
    req: dict[str, list] = {k: [] for k in (
        "request_idx", "phase", "send_ns", "first_content_ns", "last_content_ns", "last_choices_ns", "usage_ns",
        "done_ns", "last_chunk_ns", "end_ns", "output_tokens", "num_chunks", "num_content_chunks",
        "coalesced_chunks")}
    chunks: dict[str, list] = {k: [] for k in ("request_idx", "seq", "t_ns", "read_idx", "nbytes", "content",
                                               "coalesced")}
    for i, tail in enumerate(tails_ms):
        send = i * 10_000 * MS
        sent = [send + int((ttft_ms + k * itl_ms) * MS) for k in range(tokens)]
        read = [min(k // per_read * per_read + per_read - 1, tokens - 1) for k in range(tokens)]
        stamps = [sent[r] for r in read]
        done = stamps[-1] + int(tail * MS)
        for col, v in zip(req, (i, "measure", send, stamps[0], stamps[-1], stamps[-1], done, done, done,
                                done + MS, tokens, tokens + 2, tokens, sum(k % per_read != 0 for k in range(tokens))),
                          strict=True):
            req[col].append(v)
        for k in range(tokens):
            for col, v in zip(chunks, (i, k, stamps[k], read[k], 10, True, k % per_read != 0), strict=True):
                chunks[col].append(v)
    w.put("requests", req)
    w.put("chunks", chunks)
    w.close()
    return con


@pytest.mark.parametrize(("itl_ms", "per_read"), [(10.0, 3), (7.5, 4), (25.0, 2)])
def test_coalesced_reads_keep_the_server_schedule(tmp_path: Path, itl_ms: float, per_read: int) -> None:
    """The issue's case: a busy client reads several tokens at once. Per event, most gaps are
    0 ms (median 0); spread over each read's tokens, ITL is the schedule."""
    s = summary.summarize(_store(tmp_path, [0.0] * 5, itl_ms, per_read), "r")
    assert s["median_itl_ms"] == pytest.approx(itl_ms, abs=1e-3)
    assert s["p99_itl_ms"] == pytest.approx(itl_ms, abs=1e-3)
    assert s["raw_median_itl_ms"] == 0.0
    assert s["raw_max_itl_ms"] == pytest.approx(itl_ms * per_read)
    assert s["coalesced_fraction"] == pytest.approx(sum(k % per_read != 0 for k in range(12)) / 12)
    assert any("per-event gaps" in w and "median 0.00 ms" in w for w in s["warnings"])


def test_late_usage_and_done_leave_e2e_and_tpot_alone(tmp_path: Path) -> None:
    """Content from 16 ms to 121 ms, usage and [DONE] at 400 ms: TPOT 10.5 ms (not 38.4),
    e2e 121 ms (not 400), and the 279 ms delay is a warning of its own."""
    s = summary.summarize(_store(tmp_path, [279.0] * 3, 10.5, 1, tokens=11), "r")
    assert s["median_tpot_ms"] == pytest.approx(10.5)
    assert s["median_e2el_ms"] == pytest.approx(121.0)
    assert s["median_trailing_ms"] == pytest.approx(279.0)
    assert any("typically arrived 279.0 ms after" in w for w in s["warnings"])


def test_a_rare_long_tail_warns_at_p99(tmp_path: Path) -> None:
    tails = [0.5] * 60 + [1500.0]
    s = summary.summarize(_store(tmp_path, tails, 20.0, 1, tokens=4), "r")
    assert s["median_trailing_ms"] == pytest.approx(0.5)
    assert s["max_trailing_ms"] == pytest.approx(1500.0)
    assert [w for w in s["warnings"] if "usage/[DONE]" in w] == [
        f"usage/[DONE] arrived {s['p99_trailing_ms']:.0f} ms after the last event with choices at p99 "
        f"(> {summary.TRAILING_WARN_P99_MS:g} ms); e2e and TPOT end at that event"]


def test_prompt_tail_gives_no_warning(tmp_path: Path) -> None:
    s = summary.summarize(_store(tmp_path, [0.2, 1.0, 3.0], 12.0, 1), "r")
    assert s["max_trailing_ms"] == pytest.approx(3.0)
    assert not [w for w in s["warnings"] if "usage/[DONE]" in w]
    assert s["coalesced_fraction"] == 0.0 and s["raw_median_itl_ms"] == pytest.approx(12.0)
