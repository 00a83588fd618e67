"""Percentiles from stored buckets: PromQL's histogram_quantile, increases with counter
resets, windows, label matching; labels as stored."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from infbench.store import create_run
from probes.prometheus.histogram import _increase, histogram_quantile, window_histogram
from probes.prometheus.labels import format_labels, parse_labels
from tests.support.stores import new_store

INF = math.inf


@pytest.mark.parametrize(("q", "want"), [
    (0.5, 0.15),     # rank 5 of 10: in (0.1, 0.2], 3 of the bucket's 6 -> 0.1 + 0.1 * 3/6
    (0.1, 0.05),     # rank 1: first bucket (0, 0.1] holds 2 -> half way
    (0.95, 0.2),     # rank 9.5: in the +Inf bucket -> the highest finite bound
    (0.0, 0.0),
])
def test_quantile_interpolates_like_promql(q: float, want: float) -> None:
    bounds, cum = (0.1, 0.2, INF), (2, 8, 10)
    assert histogram_quantile(q, bounds, cum) == pytest.approx(want)


def test_quantile_of_nothing_is_none_and_bad_input_is_refused() -> None:
    assert histogram_quantile(0.5, (0.1, INF), (0, 0)) is None
    with pytest.raises(ValueError):
        histogram_quantile(1.5, (0.1, INF), (1, 1))
    with pytest.raises(ValueError):
        histogram_quantile(0.5, (0.1, 0.2), (1, 1))  # no +Inf


def test_increase_handles_resets_and_windows() -> None:
    t = np.array([0, 10, 20, 30, 40], dtype=np.int64)
    v = np.array([5.0, 7.0, 2.0, 4.0, 4.0])  # restarted between 10 and 20
    assert _increase(t, v, None, None) == 2 + 2 + 2 + 0
    assert _increase(t, v, 20, None) == 2          # from the sample at 20
    assert _increase(t, v, 15, 30) == 2 + 2        # from the last sample before 15 (at 10)
    assert _increase(t, v, 45, None) == 0


def _store(tmp_path: Path, rows: list[tuple[int, str, str, float]]):  # type: ignore[no-untyped-def]
    con = new_store(tmp_path / "h.duckdb")
    create_run(con, run_id="r", config={}, target_url="http://x", model="m", endpoint="completions",
               t0_monotonic_ns=0)
    con.executemany("INSERT INTO metric_samples (run_id, t_ns, source, name, labels, value) "
                    "VALUES ('r', ?, 'prometheus', ?, ?, ?)", rows)
    return con


def test_window_histogram_sums_series_and_honours_the_window(tmp_path: Path) -> None:
    rows = []
    # Two replicas; cumulative buckets at le=0.1, 0.5, +Inf; samples at t = -1, 0, 1, 2 s.
    series = {"a": [(0, 0, 0), (1, 1, 1), (1, 3, 4), (2, 5, 6)],
              "b": [(0, 0, 0), (0, 2, 2), (0, 2, 2), (0, 2, 3)]}
    for inst, points in series.items():
        for k, (c1, c5, ci) in enumerate(points):
            t = (k - 1) * 1_000_000_000
            for le, c in (("0.1", c1), ("0.5", c5), ("+Inf", ci)):
                rows.append((t, "x_seconds_bucket", format_labels({"instance": inst, "le": le}), c))
    con = _store(tmp_path, rows)
    h = window_histogram(con, "r", "x_seconds")
    assert h.bounds == (0.1, 0.5, INF) and h.cumulative == (2, 7, 9)
    assert h.bucket_index(0.5) == 1 and h.quantile(0.5) == pytest.approx(0.1 + 0.4 * (4.5 - 2) / 5)
    only_a = window_histogram(con, "r", "x_seconds", match={"instance": "a"})
    assert only_a.cumulative == (2, 5, 6)
    late = window_histogram(con, "r", "x_seconds", start_ns=1_000_000_000)
    assert late.cumulative == (1, 2, 3)  # a: +1/+2/+2, b: 0/0/+1
    empty = window_histogram(con, "r", "nothing")
    assert empty.count == 0 and empty.bucket_index(0.5) is None


@pytest.mark.parametrize("labels", [
    {"model_name": "m", "le": "0.1"},
    {"path": 'C:\\dir "quoted"', "note": "line\nbreak", "empty": ""},
])
def test_labels_round_trip(labels: dict[str, str]) -> None:
    assert parse_labels(format_labels(labels)) == labels


def test_labels_as_the_target_printed_them() -> None:
    assert parse_labels('model_name="qwen",le="+Inf"') == {"model_name": "qwen", "le": "+Inf"}
    with pytest.raises(ValueError):
        parse_labels('model_name=qwen')


def test_server_percentiles_find_whichever_name_the_server_used(tmp_path: Path) -> None:
    from probes.prometheus.server_view import server_percentiles
    rows = []
    # A vLLM 0.10 server: ITL under its old name; TTFT under the one name it always had.
    for name, counts in (("vllm:time_per_output_token_seconds_bucket", (0, 10, 10)),
                         ("vllm:time_to_first_token_seconds_bucket", (0, 1, 4))):
        for t, scale in ((-500_000_000, 0), (2_000_000_000, 1)):
            for le, c in zip(("0.05", "0.1", "+Inf"), counts, strict=True):
                rows.append((t, name, format_labels({"le": le, "model_name": "m"}), c * scale))
    con = _store(tmp_path, rows)
    got = server_percentiles(con, "r")
    assert set(got) == {"itl", "ttft"}
    assert got["itl"]["name"] == "vllm:time_per_output_token_seconds" and got["itl"]["count"] == 10
    assert got["itl"]["p50_bucket_s"] == [0.05, 0.1] and got["itl"]["p50_s"] == pytest.approx(0.075)
    # TTFT: 1 of 4 at or below 0.1 s, the rest above every bound: p50 is the top finite bound.
    assert got["ttft"]["p50_s"] == 0.1 and got["ttft"]["p50_bucket_s"] == [0.1, None]
