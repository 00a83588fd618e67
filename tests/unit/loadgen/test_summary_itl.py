"""ITL statistics from the sliced histogram agree with an exact computation over every gap."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import infbench.loadgen.summary as summary
from infbench.store import BatchWriter, create_run, open_store


@pytest.mark.parametrize("slice_chunks", [50, 500_000])
def test_itl_stats_match_exact_quantiles_over_all_gaps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       slice_chunks: int) -> None:
    monkeypatch.setattr(summary, "ITL_SLICE_CHUNKS", slice_chunks)
    rng = np.random.default_rng(3)
    con = open_store(tmp_path / "s.duckdb")
    create_run(con, run_id="r", config={}, target_url="u", model="m", endpoint="completions", t0_monotonic_ns=0)
    w = BatchWriter(con, "r")
    good_gaps: list[np.ndarray] = []
    req: dict[str, list] = {k: [] for k in ("request_idx", "phase", "error_class", "send_ns", "num_chunks")}
    for i in range(40):
        n = int(rng.integers(1, 30))
        content = rng.random(n) < 0.9
        t = np.cumsum(rng.integers(10_000, 40_000_000, n))
        phase = "warmup" if i < 3 else "measure"
        error = "http_500" if i % 11 == 5 else None
        req["request_idx"].append(i)
        req["phase"].append(phase)
        req["error_class"].append(error)
        req["send_ns"].append(0)
        req["num_chunks"].append(n)
        w.put("chunks", {"request_idx": [i] * n, "seq": list(range(n)), "t_ns": t.tolist(),
                         "read_idx": list(range(n)), "nbytes": [1] * n, "content": content.tolist(),
                         "coalesced": [False] * n})
        if phase == "measure" and error is None:
            good_gaps.append(np.diff(t[content]) / 1e6)
    w.put("requests", req)
    w.close()
    gaps = np.concatenate(good_gaps)
    out = summary._itl_stats(con, "r")
    assert out["mean_itl_ms"] == pytest.approx(gaps.mean())
    assert out["std_itl_ms"] == pytest.approx(gaps.std(), rel=1e-6)
    assert out["max_itl_ms"] == pytest.approx(gaps.max())
    for p in summary.PERCENTILES:
        # Gaps are rounded to 1 us before the quantile, so the answer is within 1 us.
        assert out[f"p{summary._pkey(p)}_itl_ms"] == pytest.approx(np.percentile(gaps, p), abs=1e-3)
    assert out["median_itl_ms"] == pytest.approx(np.median(gaps), abs=1e-3)


def test_itl_stats_without_gaps_are_none(tmp_path: Path) -> None:
    con = open_store(tmp_path / "s.duckdb")
    create_run(con, run_id="r", config={}, target_url="u", model="m", endpoint="completions", t0_monotonic_ns=0)
    out = summary._itl_stats(con, "r")
    assert out["p99_itl_ms"] is None and out["mean_itl_ms"] is None
