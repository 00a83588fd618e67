"""ITL statistics from the sliced histograms agree with exact computations over every event,
for both definitions: spread over each read's events (`*_itl_ms`) and per event (`raw_*`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import infbench.loadgen.summary as summary
from infbench.store import BatchWriter, create_run
from tests.support.stores import new_store


def _spread_and_raw(t: np.ndarray, read: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The definitions, written out event by event (the reference the SQL must match)."""
    spread, raw = [], []
    for k in range(len(t)):
        if k:
            raw.append((t[k] - t[k - 1]) / 1e6)
        if read[k] == read[0]:
            continue  # same read as the first content event: no measurable gap
        prev = t[read < read[k]].max()
        n = np.count_nonzero(read == read[k])
        spread.append((t[k] - prev) / 1e6 / n)
    return np.array(spread), np.array(raw)


@pytest.mark.parametrize(("slice_chunks", "seed", "max_per_read"), [(50, 3, 1), (500_000, 4, 4), (37, 5, 9)])
def test_itl_stats_match_exact_quantiles(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         slice_chunks: int, seed: int, max_per_read: int) -> None:
    monkeypatch.setattr(summary, "ITL_SLICE_CHUNKS", slice_chunks)
    rng = np.random.default_rng(seed)
    con = new_store(tmp_path / "s.duckdb")
    create_run(con, run_id="r", config={}, target_url="u", model="m", endpoint="completions", t0_monotonic_ns=0)
    w = BatchWriter(con, "r")
    spread_all, raw_all = [], []
    req: dict[str, list] = {k: [] for k in ("request_idx", "phase", "error_class", "send_ns", "num_chunks")}
    for i in range(40):
        n = int(rng.integers(1, 40))
        content = rng.random(n) < 0.9
        # Events share a read (and its stamp) in runs of 1..max_per_read.
        read = np.repeat(np.arange(n), rng.integers(1, max_per_read + 1, n))[:n]
        read_t = np.cumsum(rng.integers(10_000, 40_000_000, n))
        t = read_t[read]
        phase = "warmup" if i < 3 else "measure"
        error = "http_500" if i % 11 == 5 else None
        for col, v in zip(req, (i, phase, error, 0, n), strict=True):
            req[col].append(v)
        w.put("chunks", {"request_idx": [i] * n, "seq": list(range(n)), "t_ns": t.tolist(),
                         "read_idx": read.tolist(), "nbytes": [1] * n, "content": content.tolist(),
                         "coalesced": [False] * n})
        if phase == "measure" and error is None and content.any():
            spread, raw = _spread_and_raw(t[content], read[content])
            spread_all.append(spread)
            raw_all.append(raw)
    w.put("requests", req)
    w.close()
    out = summary._itl_stats(con, "r")
    for prefix, gaps in (("", np.concatenate(spread_all)), ("raw_", np.concatenate(raw_all))):
        assert out[f"{prefix}mean_itl_ms"] == pytest.approx(gaps.mean())
        assert out[f"{prefix}std_itl_ms"] == pytest.approx(gaps.std(), rel=1e-6)
        assert out[f"{prefix}max_itl_ms"] == pytest.approx(gaps.max())
        for p in summary.PERCENTILES:
            # Gaps are rounded to 1 us before the quantile, so the answer is within 1 us.
            got = out[f"{prefix}p{summary._pkey(p)}_itl_ms"]
            assert got == pytest.approx(np.percentile(gaps, p), abs=1e-3), (prefix, p)
        assert out[f"{prefix}median_itl_ms"] == pytest.approx(np.median(gaps), abs=1e-3)
    # The store's view gives the same spread values, so the gate and the report agree.
    view = np.array([r[0] for r in con.execute(
        "SELECT itl_ms FROM itl JOIN requests USING (run_id, request_idx) "
        "WHERE phase = 'measure' AND error_class IS NULL AND itl_ms IS NOT NULL").fetchall()])
    assert np.sort(view) == pytest.approx(np.sort(np.concatenate(spread_all)))
    if max_per_read > 1:  # coalesced reads: the definitions differ, raw has many zeros
        assert out["raw_median_itl_ms"] < out["median_itl_ms"]


def test_itl_stats_without_gaps_are_none(tmp_path: Path) -> None:
    con = new_store(tmp_path / "s.duckdb")
    create_run(con, run_id="r", config={}, target_url="u", model="m", endpoint="completions", t0_monotonic_ns=0)
    out = summary._itl_stats(con, "r")
    assert out["p99_itl_ms"] is None and out["mean_itl_ms"] is None and out["raw_median_itl_ms"] is None
