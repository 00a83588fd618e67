"""A run's Prometheus pull travels with it: export then import keeps the pulled samples
(`metric_samples` with source 'prometheus', raw buckets), the `prometheus_pulls` row and
`runs.t0_unix_ns`, so server-side percentiles recompute the same on the other side."""

from __future__ import annotations

from pathlib import Path

import pytest

from infbench.store import create_run, finish_run, open_store
from infbench.store.transfer import export_run, import_run
from probes.prometheus.histogram import window_histogram
from probes.prometheus.labels import format_labels


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_pull_round_trip(tmp_path: Path, fmt: str) -> None:
    src = open_store(tmp_path / "a.duckdb")
    for run in ("r1", "r2"):
        create_run(src, run_id=run, config={}, target_url="u", model="m", endpoint="chat",
                   t0_monotonic_ns=0)
        finish_run(src, run, status="completed")
    src.execute("UPDATE runs SET t0_unix_ns = 1800000000123456789")
    rows = [(t, "vllm:time_to_first_token_seconds_bucket",
             format_labels({"le": le, "model_name": "m"}), c * k)
            for k, t in enumerate((-500_000_000, 0, 500_000_000))
            for le, c in (("0.1", 2), ("0.5", 5), ("+Inf", 6))]
    for run in ("r1", "r2"):
        src.executemany("INSERT INTO metric_samples (run_id, t_ns, source, name, labels, value) "
                        f"VALUES ('{run}', ?, 'prometheus', ?, ?, ?)", rows)
        src.execute("INSERT INTO prometheus_pulls VALUES (?, 0, now()::TIMESTAMP, 'http://p:9090', "
                    "'instance=\"a:1\"', 1.0, 2.0, 0.5, 4, 1, 1, 9, 'partial', '[\"api: x\"]', "
                    "'{\"vllm\": 1}')", [run])
    files = export_run(src, "r1", tmp_path / "out", fmt)
    assert tmp_path / "out" / f"prometheus_pulls.{fmt}" in files
    dst = open_store(tmp_path / "b.duckdb")
    assert import_run(dst, tmp_path / "out") == ["r1"]
    for sql in ("SELECT * EXCLUDE (pulled_at) FROM prometheus_pulls WHERE run_id = 'r1'",
                "SELECT t0_unix_ns FROM runs WHERE run_id = 'r1'"):
        assert dst.execute(sql).fetchall() == src.execute(sql).fetchall()
    assert dst.execute("SELECT count(*) FROM prometheus_pulls").fetchone() == (1,)
    a = window_histogram(src, "r1", "vllm:time_to_first_token_seconds", start_ns=0)
    b = window_histogram(dst, "r1", "vllm:time_to_first_token_seconds", start_ns=0)
    assert a == b and a.cumulative == (2, 5, 6)  # from the sample at t0 to the last
