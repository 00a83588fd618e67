"""`infbench diagnose memory` on the reference engine: memory growth injected at two rates
(not round, an order of magnitude apart) is measured per finished request within 10%, and a
clean run has no growth finding. The engine runs as a real subprocess; `infbench run` scrapes
its /metrics into memory_samples."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from playbooks.memory import diagnose_memory
from tests.e2e.engine_process import running_engine

pytestmark = pytest.mark.e2e


def _run_and_diagnose(tmp_path: Path, requests: int, *fault: str) -> dict:
    db = tmp_path / "m.duckdb"
    with running_engine(*fault) as engine:
        r = subprocess.run(
            [sys.executable, "-m", "infbench", "run", "--url", engine.url, "--db", str(db),
             "--quiet", "--arrival", "closed", "--concurrency", "16", "--num-requests",
             str(requests), "--input-tokens", "64", "--output-tokens", "32",
             "--scrape-interval", "0.1"], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr[-2000:]
    out = subprocess.run([sys.executable, "-m", "infbench", "diagnose", "memory", "last", "--db",
                          str(db), "--json"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)


@pytest.mark.parametrize(("rate", "requests"), [(2_718_281, 160), (314_159, 300)])
def test_growth_per_request_within_10_percent_of_the_injected_rate(tmp_path: Path, rate: int,
                                                                   requests: int) -> None:
    d = _run_and_diagnose(tmp_path, requests, "--fault", f"memory-growth:bytes_per_request={rate}")
    growth = next(f for f in d["findings"] if f["verdict"] == "memory_growth_per_request")
    measured = next(e for e in growth["evidence"] if e["name"] == "rss_vs_finished_requests")
    slope = measured["values"]["slope_bytes_per_request"]
    assert abs(slope - rate) <= 0.10 * rate, (slope, rate)
    assert measured["values"]["requests_finished"] >= requests - 20
    # The suspects compare the two halves of the run: a run of a second or so (5-6 scrapes)
    # leaves a half with too few points and says "untested", rightly. Long enough for both.
    assert d["context"]["ledger"]["samples"] >= 12, d["context"]["ledger"]["samples"]
    sus = {s["suspect"].split(" (")[0]: s["status"] for s in d["context"]["ledger"]["suspects"]}
    assert sus["KV pool"] == "ruled_out"
    assert sus["per-request retained objects"] == "fits"
    assert sus["allocator fragmentation"] == "ruled_out"
    assert sus["CUDA graph pools"] == "ruled_out"
    # The evidence's SQL is the query that ran: rerun it on the store.
    con = duckdb.connect(str(tmp_path / "m.duckdb"), read_only=True)
    try:
        rows = con.execute(measured["sql"] if measured["sql"] else "SELECT 1").fetchall()
        assert len(rows) == measured["values"]["samples"]
        again = diagnose_memory(con, d["run_id"])
    finally:
        con.close()
    assert "memory_growth_per_request" in again.verdicts()


def test_clean_run_has_no_growth_finding(tmp_path: Path) -> None:
    d = _run_and_diagnose(tmp_path, 300)
    assert "memory_growth_per_request" not in [f["verdict"] for f in d["findings"]]
    rss = d["context"]["ledger"]["series"]["rss"]
    assert rss["kind"] == "fixed"
    # What the engine itself keeps per request (step log, histograms) is kilobytes.
    assert abs(rss["slope_bytes_per_request"]) < 20_000
    assert {c["kind"] for c in d["context"]["ledger"]["components"].values()} == {"fixed"}
