"""Timestamp accuracy against a server whose chunk schedule is known.

The server (its own process) logs the monotonic time of every event write; on one host that
clock is the client's. Every content chunk the client records must be within 1 ms of the
server's write at p99, with 64 streams in flight, so TTFT and ITL are within 1 ms too.
On Linux a read carries the kernel's arrival stamp of its last packet, so a client that is
late to read does not delay that stamp; but events that arrived apart and were read together
share it. A neighbour that takes the client's CPU for milliseconds (this is a 2-core shared
machine) can do that to a few reads, hence a second attempt; both failures are reported.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from infbench.loadgen.arrivals import Arrivals
from infbench.loadgen.execute import execute_run
from infbench.loadgen.lengths import LengthDist
from infbench.loadgen.preflight import preflight
from infbench.loadgen.runner import RunSettings
from infbench.loadgen.workloads import Synthetic
from infbench.store import open_store
from tests.support.process import sse_server

pytestmark = pytest.mark.e2e

TTFT_MS, ITL_MS, TOKENS, STREAMS = 50.0, 20.0, 16, 64


def _attempts(n: int, attempt: Callable[[Path], None], tmp_path: Path, what: str) -> None:
    """Pass on the first of `n` attempts that passes; else fail with every attempt's reason."""
    failures = []
    for i in range(n):
        try:
            attempt(tmp_path / f"a{i}.duckdb")
            return
        except AssertionError as exc:
            failures.append(str(exc).splitlines()[0])
    pytest.fail(f"{what} in all {n} attempts: {failures}")


def test_ttft_and_itl_within_1ms_of_truth_at_64_streams(tmp_path: Path) -> None:
    _attempts(2, _one_attempt, tmp_path, "timing off")


def _one_attempt(db: Path) -> None:
    with sse_server("--ttft-ms", str(TTFT_MS), "--itl-ms", str(ITL_MS), "--log-timing", nice=10) as url:
        target = asyncio.run(preflight(url, "completions", None, None))
        settings = RunSettings(url=target.url, endpoint="completions", model=target.model,
                               arrivals=Arrivals("closed", concurrency=STREAMS), num_requests=STREAMS * 3)
        wl = Synthetic(LengthDist.parse("64", "in"), LengthDist.parse(str(TOKENS), "out"), target.tokens)
        result = execute_run(settings, wl, db, {"test": "timing"})
        with urllib.request.urlopen(url + "/_log") as resp:
            truth: dict[str, list[int]] = json.loads(resp.read())
    assert result.summary["completed"] == STREAMS * 3

    con = open_store(db, read_only=True)
    t0 = con.execute("SELECT t0_monotonic_ns FROM runs").fetchone()[0]
    rows = con.execute(
        "SELECT r.server_request_id, r.send_ns, list(c.t_ns ORDER BY c.seq) FROM requests r "
        "JOIN chunks c USING (run_id, request_idx) WHERE c.content GROUP BY ALL").fetchall()
    ttft_err, itl_err, chunk_err = [], [], []
    for rid, send_ns, client_ts in rows:
        server_ts = np.array(truth[rid], dtype=np.int64)
        client = np.array(client_ts, dtype=np.int64) + t0
        assert len(client) == len(server_ts) == TOKENS
        chunk_err.extend((client - server_ts) / 1e6)
        ttft_err.append(((client[0] - (send_ns + t0)) - (server_ts[0] - (send_ns + t0))) / 1e6)
        itl_err.extend((np.diff(client) - np.diff(server_ts)) / 1e6)
    # The client reads a chunk after the server wrote it: never before.
    assert min(chunk_err) > -0.05
    con.close()
    assert np.percentile(np.abs(ttft_err), 99) < 1.0, f"TTFT error p99 {np.percentile(np.abs(ttft_err), 99):.3f} ms"
    assert np.percentile(np.abs(itl_err), 99) < 1.0, f"ITL error p99 {np.percentile(np.abs(itl_err), 99):.3f} ms"
    assert np.percentile(chunk_err, 99) < 1.0, f"chunk delay p99 {np.percentile(chunk_err, 99):.3f} ms"
    # And the measured ITL is the schedule the server kept (not read batching).
    assert result.summary["coalesced_fraction"] < 0.01


WIDE_STREAMS, WIDE_TOKENS, WIDE_ITL_MS = 256, 64, 10.0


def test_client_adds_little_to_ttft_at_256_streams(tmp_path: Path) -> None:
    """256 lock-step streams start and finish together; the client's share of TTFT stays small.

    The client's share is the measured TTFT minus the server's own (first write minus the
    moment the server had read the request): request setup and sending on the way out,
    stamping on the way back. Peers added 300 ms (AIPerf) to 1 s (guidellm) at p99 here.

    The way-out share ends when the server's handler starts, so it also holds the (niced)
    server process's own wait for a CPU: a busy neighbour on a 2-core machine inflates it
    with no fault of the client's. Hence up to three attempts.
    """
    _attempts(3, _wide_attempt, tmp_path, "client-added TTFT too high")


def _wide_attempt(db: Path) -> None:
    with sse_server("--ttft-ms", str(TTFT_MS), "--itl-ms", str(WIDE_ITL_MS), "--log-timing", nice=10) as url:
        target = asyncio.run(preflight(url, "completions", None, None))
        settings = RunSettings(url=target.url, endpoint="completions", model=target.model,
                               arrivals=Arrivals("closed", concurrency=WIDE_STREAMS),
                               num_requests=WIDE_STREAMS * 2)
        wl = Synthetic(LengthDist.parse("64", "in"), LengthDist.parse(str(WIDE_TOKENS), "out"), target.tokens)
        result = execute_run(settings, wl, db, {"test": "wide"})
        with urllib.request.urlopen(url + "/_log") as resp:
            writes: dict[str, list[int]] = json.loads(resp.read())
        with urllib.request.urlopen(url + "/_arrivals") as resp:
            arrivals: dict[str, int] = json.loads(resp.read())
    assert result.summary["completed"] == WIDE_STREAMS * 2
    con = open_store(db, read_only=True)
    t0 = con.execute("SELECT t0_monotonic_ns FROM runs").fetchone()[0]
    rows = con.execute("SELECT server_request_id, send_ns, first_content_ns FROM requests").fetchall()
    con.close()
    added = np.array([((first - send) - (writes[rid][0] - arrivals[rid])) / 1e6 for rid, send, first in rows])
    stamp_delay = np.array([(first + t0 - writes[rid][0]) / 1e6 for rid, _, first in rows])
    assert added.min() > 0  # the client's share includes the way out and back: never negative
    assert np.percentile(stamp_delay, 99) < 1.0, f"first-chunk stamp delay p99 {np.percentile(stamp_delay, 99):.3f} ms"
    assert np.percentile(added, 99) < 20.0, f"client-added TTFT p99 {np.percentile(added, 99):.2f} ms"
