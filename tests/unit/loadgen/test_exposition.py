"""The live run's Prometheus exposition (`--metrics-port`): served while the run goes, and
its counters and histograms equal what the store says about the same requests."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import aiohttp
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from infbench.loadgen.arrivals import Arrivals
from infbench.loadgen.http.client import run_timed
from infbench.loadgen.run.runner import Runner, RunSettings
from infbench.loadgen.telemetry.exposition import ITL_BUCKETS, TTFT_BUCKETS, parse_bind, spread_itl
from infbench.loadgen.workloads import Synthetic, TokenModel
from infbench.loadgen.workloads.lengths import LengthDist
from infbench.store import BatchWriter, create_run
from tests.support.process import sse_server
from tests.support.stores import new_store


def _families(text: str) -> dict:
    return {f.name: f for f in text_string_to_metric_families(text)}


def _buckets(fam) -> list[tuple[float, float]]:
    return [(float(s.labels["le"]), s.value) for s in fam.samples if s.name.endswith("_bucket")]


def _expected(values: np.ndarray, bounds: tuple[float, ...]) -> list[float]:
    # le is inclusive: a value equal to a bound is in that bound's bucket.
    return [float((values <= b).sum()) for b in (*bounds, float("inf"))]


def test_served_during_the_run_and_equal_to_the_store(tmp_path: Path) -> None:
    with sse_server("--ttft-ms", "4", "--itl-ms", "2", "--faults", "http500:5") as url:
        con = new_store(tmp_path / "x.duckdb")
        t0 = time.monotonic_ns()
        create_run(con, run_id="r", config={}, target_url=url, model="test-model", endpoint="completions",
                   t0_monotonic_ns=t0)
        writer = BatchWriter(con, "r")
        settings = RunSettings(url=url, endpoint="completions", model="test-model",
                               arrivals=Arrivals("closed", concurrency=4), num_requests=60,
                               metrics_bind=("127.0.0.1", 0))
        wl = Synthetic(LengthDist.parse("16", "in"), LengthDist.parse("uniform:4:40", "out"),
                       TokenModel())
        runner = Runner(settings, wl, writer, t0)
        seen: list[str] = []

        async def scrape_while_running() -> None:
            while runner._expo is None or runner._expo.url is None:
                await asyncio.sleep(0.005)
            async with aiohttp.ClientSession() as s:
                while True:  # until a scrape shows requests sent mid-run
                    async with s.get(runner._expo.url) as r:
                        assert r.status == 200
                        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
                        seen.append(await r.text())
                    if _families(seen[-1])["infbench_requests_sent"].samples[0].value > 0:
                        return
                    await asyncio.sleep(0.005)

        async def both() -> None:
            scraper = asyncio.create_task(scrape_while_running())
            await runner.run()
            await asyncio.wait_for(scraper, 5)

        run_timed(both())
        writer.close()
        assert seen, "the exposition was never reachable during the run"
        expo = runner._expo
        assert expo is not None
        expo.check_invariants()
        fams = _families(expo.render())
        ok = con.execute("SELECT count(*) FROM requests WHERE error_class IS NULL").fetchone()[0]
        failed = con.execute("SELECT count(*) FROM requests WHERE error_class = 'http_500'").fetchone()[0]
        assert ok + failed == 60 and failed == 12
        (s_done,) = fams["infbench_requests_completed"].samples[:1]
        assert s_done.value == ok
        errs = {s.labels["error_class"]: s.value for s in fams["infbench_request_errors"].samples
                if s.name.endswith("_total")}
        assert errs == {"http_500": 12}
        assert fams["infbench_requests_sent"].samples[0].value == 60
        ttft = con.execute("SELECT ttft_ms / 1e3 FROM request_latency WHERE error_class IS NULL").fetchnumpy()
        (ttft_col,) = ttft.values()
        assert [c for _, c in _buckets(fams["infbench_time_to_first_token_seconds"])] == \
            _expected(np.asarray(ttft_col), TTFT_BUCKETS)
        itl = con.execute("SELECT itl_ms / 1e3 FROM itl JOIN requests USING (run_id, request_idx) "
                          "WHERE itl_ms IS NOT NULL AND error_class IS NULL").fetchnumpy()
        (itl_col,) = itl.values()
        got = [c for _, c in _buckets(fams["infbench_inter_token_latency_seconds"])]
        assert got[-1] == len(itl_col) > ok  # one per content event after the first read
        assert got == _expected(np.asarray(itl_col), ITL_BUCKETS)
        tokens = con.execute("SELECT sum(output_tokens) FROM requests WHERE error_class IS NULL").fetchone()[0]
        assert fams["infbench_output_tokens"].samples[0].value == tokens
        con.close()
    # Stopped with the run: the port no longer answers.
    with pytest.raises(OSError):
        import urllib.request
        urllib.request.urlopen(expo.url, timeout=2)


def test_spread_itl_splits_a_reads_gap_over_its_events_per_stream() -> None:
    # Stream 1: reads 0 (one content event), 1 (three events, 30 ms later), 2 (one event,
    # 5 ms later), and a non-content event (usage) in read 3. Stream 2 starts at t = 0 again:
    # its first read has no gap (not one measured from stream 1's last read).
    one = ([0, 30_000_000, 30_000_000, 30_000_000, 35_000_000, 36_000_000],
           [0, 1, 1, 1, 2, 3], [True, True, True, True, True, False])
    two = (np.array([0, 0, 8_000_000]), np.array([0, 0, 1]), np.array([True, True, True]))
    empty = ([], [], [])
    values, weights = spread_itl([one, empty, two])
    assert np.allclose(values, [0.010, 0.005, 0.008]) and list(weights) == [3, 1, 1]
    assert spread_itl([empty])[0].size == 0 and spread_itl([([1], [0], [True])])[0].size == 0


@pytest.mark.parametrize(("text", "want"), [("9100", ("127.0.0.1", 9100)),
                                            ("0.0.0.0:9100", ("0.0.0.0", 9100)),
                                            ("[::1]:0", ("::1", 0))])
def test_parse_bind(text: str, want: tuple[str, int]) -> None:
    assert parse_bind(text) == want


@pytest.mark.parametrize("text", ["x", "70000", "host:"])
def test_parse_bind_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="metrics-port"):
        parse_bind(text)
