"""How fast can infbench's client go, and what does it add to latency?

    python benchmarks/bench_client_ceiling.py [--quick] [--skip-memory]

Against a zero-delay streaming server on loopback (tests/support/sse_server.py, its own
process), one infbench process with full per-chunk recording into DuckDB is compared in the
same run, round by round, with a bare aiohttp reader that only reads the stream (the floor
any aiohttp-based client pays) and with a reader that does per chunk what vLLM's
`bench serve` client does (the fastest established client; vLLM itself is not installed here):

1. ceiling: 64 streams x 128 tokens, chunks/s and requests/s;
2. TTFT overhead at 256 concurrent streams against a server with 50 ms TTFT: measured TTFT
   minus the server's own (from its arrival and first-write logs, same clock), split into
   the way out and the way back; and ITL against the server's write log (infbench's spread
   definition and the per-event gaps), also beside a busy-loop process;
3. a long stream: one 32K-token output after a 32K-token prompt;
4. memory: peak RSS of `infbench run` subprocesses recording about 1M and 5M chunks
   (including the end-of-run summary).

Results go to benchmarks/results/client_ceiling.md with a description of the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import codecs
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import duckdb
import numpy as np
from machine_info import describe
from neighbour import busy_neighbour

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from infbench.http_client import request  # noqa: E402
from infbench.loadgen.arrivals import Arrivals  # noqa: E402
from infbench.loadgen.http.client import run_timed  # noqa: E402
from infbench.loadgen.run.runner import Runner, RunSettings  # noqa: E402
from infbench.loadgen.telemetry.watch import Watch, WatchSettings  # noqa: E402
from infbench.loadgen.workloads import Synthetic, TokenModel  # noqa: E402
from infbench.loadgen.workloads.lengths import LengthDist  # noqa: E402
from infbench.store import BatchWriter, create_run, open_store  # noqa: E402
from tests.support.process import sse_server  # noqa: E402

MODEL = "test-model"


def machine() -> str:
    return describe(f"aiohttp {aiohttp.__version__}", f"duckdb {duckdb.__version__}")


# -- the bare reader: the floor any client pays -------------------------------------------
async def bare_reader(url: str, streams: int, per_stream: int, tokens: int, prompt: str = "x") -> tuple[float, int]:
    body = json.dumps({"model": MODEL, "prompt": prompt, "max_tokens": tokens, "stream": True}).encode()
    chunks = 0
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), read_bufsize=4 << 20) as s:
        async def worker() -> None:
            nonlocal chunks
            for _ in range(per_stream):
                async with s.post(url + "/v1/completions", data=body,
                                  headers={"Content-Type": "application/json"}) as r:
                    async for data in r.content.iter_any():
                        chunks += data.count(b"\n\n")
        t = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(streams)))
        return time.perf_counter() - t, chunks


async def vllm_style_reader(url: str, streams: int, per_stream: int, tokens: int) -> tuple[float, int]:
    """The per-chunk work of vLLM's `bench serve` OpenAI completions client, as read in
    vllm/benchmarks/lib/endpoint_request_func.py (2026-11): aiohttp `iter_any()` per read, the
    read stripped and decoded incrementally into a str buffer, complete messages split off at
    blank lines (an unterminated last one accepted once it decodes as JSON), `json.loads` per
    message, a `perf_counter()` stamp and an ITL append per token message. Written here from
    that description, to give the established client's cost in the same run."""
    body = json.dumps({"model": MODEL, "prompt": "x", "max_tokens": tokens, "stream": True,
                       "stream_options": {"include_usage": True}}).encode()
    chunks = 0
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as s:
        async def worker() -> None:
            nonlocal chunks
            for _ in range(per_stream):
                st = last = time.perf_counter()
                itl: list[float] = []
                ttft: float | None = None
                buf = ""
                dec = codecs.getincrementaldecoder("utf-8")()
                async with s.post(url + "/v1/completions", data=body,
                                  headers={"Content-Type": "application/json"}) as r:
                    async for data in r.content.iter_any():
                        data = data.strip()
                        if not data:
                            continue
                        buf += dec.decode(data)
                        messages = []
                        while "\n\n" in buf:
                            msg, buf = buf.split("\n\n", 1)
                            if msg.strip():
                                messages.append(msg.strip())
                        if buf.startswith("data: "):
                            rest = buf.removeprefix("data: ").strip()
                            if rest == "[DONE]":
                                messages.append(buf.strip())
                                buf = ""
                            elif rest:
                                try:
                                    json.loads(rest)
                                    messages.append(buf.strip())
                                    buf = ""
                                except json.JSONDecodeError:
                                    pass
                        for msg in messages:
                            if msg.startswith(":"):
                                continue
                            payload = msg.removeprefix("data: ")
                            if payload == "[DONE]":
                                continue
                            obj = json.loads(payload)
                            if obj.get("choices"):
                                now = time.perf_counter()
                                if ttft is None:
                                    ttft = now - st
                                else:
                                    itl.append(now - last)
                                last = now
                                chunks += 1
        t = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(streams)))
        return time.perf_counter() - t, chunks


# -- infbench: full path, every chunk recorded into DuckDB ---------------------------------
def infbench_client(url: str, streams: int, requests: int, tokens: int, input_tokens: int = 16,
                    metrics_bind: tuple[str, int] | None = None, watch: bool = False) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as d:
        con = open_store(Path(d) / "b.duckdb")
        t0 = time.monotonic_ns()
        create_run(con, run_id="bench", config={}, target_url=url, model=MODEL, endpoint="completions",
                   t0_monotonic_ns=t0)
        writer = BatchWriter(con, "bench")
        settings = RunSettings(url=url, endpoint="completions", model=MODEL,
                               arrivals=Arrivals("closed", concurrency=streams), num_requests=requests,
                               metrics_bind=metrics_bind)
        wl = Synthetic(LengthDist.parse(str(input_tokens), "in"), LengthDist.parse(str(tokens), "out"), TokenModel())
        fired: list[object] = []
        runner = Runner(settings, wl, writer, t0,
                        watch=Watch(WatchSettings(), fired.append) if watch else None)
        cpu0 = time.process_time()
        t = time.perf_counter()
        run_timed(runner.run())
        wall = time.perf_counter() - t
        cpu = time.process_time() - cpu0
        writer.close()
        n_chunks, n_content, n_req, coalesced, bad = con.execute(
            "SELECT (SELECT count(*) FROM chunks), (SELECT count(*) FROM chunks WHERE content), count(*), "
            "sum(coalesced_chunks), count(*) FILTER (WHERE error_class IS NOT NULL) FROM requests").fetchone()
        ttft = con.execute("SELECT quantile_cont(ttft_ms, [0.5, 0.99]) FROM request_latency").fetchone()[0]
        con.close()
    return {"wall_s": wall, "cpu_s": cpu, "chunks": n_chunks, "content_chunks": n_content, "requests": n_req,
            "errors": bad, "coalesced": coalesced, "ttft_p50": ttft[0], "ttft_p99": ttft[1],
            "triggers": len(fired)}


def ceiling(streams: int, tokens: int, per_stream: int, burst: int, rounds: int = 5) -> list[str]:
    n_req = streams * per_stream
    with sse_server("--burst", str(burst)) as url:
        asyncio.run(bare_reader(url, streams, 1, tokens))  # warm the server
        rows = []
        for _ in range(rounds):  # take turns, so all clients see the same (shared, noisy) machine
            bw, _ = asyncio.run(bare_reader(url, streams, per_stream, tokens))
            vw, _ = asyncio.run(vllm_style_reader(url, streams, per_stream, tokens))
            ib = infbench_client(url, streams, n_req, tokens)
            rows.append((n_req * tokens / bw, n_req * tokens / vw, ib))
    out = [f"### Ceiling: {streams} streams x {tokens} tokens, {n_req} requests per client and round, "
           f"server writes {burst} event(s) per stream between yields\n",
           "Content chunks/s of each client, round by round (the clients take turns within a round).\n",
           "| round | bare aiohttp reader (reads only) | vLLM `bench serve`-style client | infbench (every chunk "
           "stamped, parsed, stored) | infbench requests/s | infbench CPU s | infbench errors |",
           "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for i, (bare, vllm, ib) in enumerate(rows, 1):
        out.append(f"| {i} | {bare:,.0f} | {vllm:,.0f} | {ib['content_chunks'] / ib['wall_s']:,.0f} | "
                   f"{ib['requests'] / ib['wall_s']:,.0f} | {ib['cpu_s']:.2f} | {ib['errors']} |")
    ibs = np.array([r[2]["content_chunks"] / r[2]["wall_s"] for r in rows])
    vs_bare = np.median(ibs / np.array([r[0] for r in rows]))
    vs_vllm = np.median(ibs / np.array([r[1] for r in rows]))
    frac = np.mean([r[2]["coalesced"] / max(r[2]["content_chunks"], 1) for r in rows])
    out.append(f"\ninfbench content chunks/s: median **{np.median(ibs):,.0f}**, best {ibs.max():,.0f}. "
               f"Median ratio within a round: infbench / vLLM-style **{vs_vllm:.2f}**, infbench / bare reader "
               f"{vs_bare:.2f}. Share of content chunks that arrived in the same socket read as the previous "
               f"one (flagged `coalesced`; ITL spreads the read's gap over them): {frac:.0%}.\n")
    return out


# A Prometheus stand-in in its own process: GET the exposition every `interval` seconds,
# count the answers, print the count when terminated. The standard library's client, as an
# outside scraper would be: it loads nothing of infbench beside the run it scrapes.
_SCRAPER = """
import signal, sys, time, urllib.request
url, interval, ok = sys.argv[1], float(sys.argv[2]), [0]
def done(*_):
    print(ok[0], flush=True); sys.exit(0)
signal.signal(signal.SIGTERM, done)
while True:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            r.read(); ok[0] += 1
    except OSError:
        pass
    time.sleep(interval)
"""


def exposition_unit_costs(tokens: int, streams: int = 5120) -> list[str]:
    """CPU per finished stream of the exposition's bookkeeping (TTFT/e2e buckets, ITL binned
    in batches) and per scrape of rendering the text, in this process."""
    from infbench.loadgen.run.types import LiveStats
    from infbench.loadgen.sse.events import ParsedStream
    from infbench.loadgen.telemetry.exposition import LiveExposition
    expo = LiveExposition(LiveStats(), model=MODEL, target="http://x", endpoint="completions")
    p = ParsedStream()
    n = tokens + 2  # content events, the finish event and usage
    p.content = np.r_[np.ones(tokens, bool), False, False]
    p.read_idx = np.arange(n)
    p.t_ns = np.arange(n) * 1_000_000
    p.first_content_ns, p.last_content_ns = 0, (tokens - 1) * 1_000_000
    c = time.process_time()
    for _ in range(streams):
        expo.observe(p, -5_000_000, n * 1_000_000, True)
    per_stream = (time.process_time() - c) / streams
    c = time.process_time()
    for _ in range(200):
        text = expo.render()
    per_scrape = (time.process_time() - c) / 200
    return [f"Exposition bookkeeping per finished {tokens}-token stream: **{per_stream * 1e6:.1f} us** CPU; "
            f"rendering one scrape ({len(text):,} bytes): **{per_scrape * 1e3:.2f} ms** CPU "
            f"(mean of {streams} streams and 200 renders, this process).\n"]


def exposition_overhead(streams: int, tokens: int, per_stream: int, rounds: int = 6,
                        scrape_s: float = 0.5) -> list[str]:
    """The live exposition (`--metrics-port`) on and off, in alternating order round by
    round, against the same server; on, a separate process scrapes it every `scrape_s`
    (30 times Prometheus's default 15 s, as the e2e tests scrape)."""
    import socket
    n_req = streams * per_stream
    rows = []
    with sse_server("--burst", "1") as url:
        asyncio.run(bare_reader(url, streams, 1, tokens))  # warm the server
        for i in range(rounds):
            result: dict[str, dict[str, float]] = {}
            for mode in (("off", "on") if i % 2 == 0 else ("on", "off")):
                if mode == "off":
                    result["off"] = infbench_client(url, streams, n_req, tokens)
                    continue
                with socket.socket() as sk:
                    sk.bind(("127.0.0.1", 0))
                    port = sk.getsockname()[1]
                scraper = subprocess.Popen([sys.executable, "-c", _SCRAPER,
                                            f"http://127.0.0.1:{port}/metrics", str(scrape_s)],
                                           stdout=subprocess.PIPE, text=True)
                try:
                    result["on"] = infbench_client(url, streams, n_req, tokens,
                                                   metrics_bind=("127.0.0.1", port))
                finally:
                    scraper.terminate()
                    out, _ = scraper.communicate(timeout=10)
                result["on"]["scrapes"] = float(out.strip() or 0)
            rows.append(result)
    out = [f"### Live exposition (`--metrics-port`) on and off: {streams} streams x {tokens} tokens, "
           f"{n_req} requests per run, server writes 1 event per stream between yields\n",
           f"Alternating order round by round; with the exposition on, another process scrapes it "
           f"every {scrape_s:g} s.\n",
           "| round | off: content chunks/s | on: content chunks/s | on/off | off: CPU s | on: CPU s | "
           "scrapes answered | off: TTFT p50 ms | on: TTFT p50 ms |",
           "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    ratios = []
    for i, r in enumerate(rows, 1):
        off, on = r["off"], r["on"]
        a, b = off["content_chunks"] / off["wall_s"], on["content_chunks"] / on["wall_s"]
        ratios.append(b / a)
        out.append(f"| {i} | {a:,.0f} | {b:,.0f} | {b / a:.3f} | {off['cpu_s']:.2f} | {on['cpu_s']:.2f} | "
                   f"{on['scrapes']:.0f} | {off['ttft_p50']:.2f} | {on['ttft_p50']:.2f} |")
    cpu = np.median([r["on"]["cpu_s"] / r["off"]["cpu_s"] for r in rows])
    out.append(f"\nMedian throughput ratio on/off **{np.median(ratios):.3f}** "
               f"(min {min(ratios):.3f}, max {max(ratios):.3f}); median CPU-seconds ratio {cpu:.3f}.\n")
    return out


def watch_unit_cost(streams: int = 256, ticks: int = 20000) -> list[str]:
    """CPU of one watch tick in this process: `streams` open exchanges on one pool, the error
    history of a full burst window, 3 replicas' samples for the departure check."""
    from collections import deque as _deque

    from infbench.loadgen.http.connection import Exchange
    from infbench.loadgen.telemetry.watch import Watcher

    class _Pool:
        def __init__(self) -> None:
            self.live = set()
            for _ in range(streams):
                ex = Exchange()
                ex.body_bytes, ex.last_ns = 100, time.monotonic_ns()
                self.live.add(ex)
            self.last_read_ns = time.monotonic_ns()

    pool = _Pool()
    counts = [0, 0, {}]
    samples = {f"r{i}": _deque([(10.0 + i, 4)] * 64, maxlen=64) for i in range(3)}
    out = []
    for fleet in (False, True):
        w = Watcher(WatchSettings(), [pool], [None], lambda: (counts[0], counts[1], counts[2]),
                    samples if fleet else None, lambda t: None)
        w._start_ns = time.monotonic_ns()
        now = time.monotonic_ns()
        c = time.process_time()
        for k in range(ticks):
            counts[0] += 3
            w.check(now + k * 100_000_000)
        per = (time.process_time() - c) / ticks
        out.append(f"One watch tick{' with the fleet departure check (3 replicas)' if fleet else ''}: "
                   f"**{per * 1e6:.1f} us** CPU ({streams} open streams; mean of {ticks} ticks); at 10 "
                   f"ticks a second, {per * 10 * 100:.3f}% of one core.\n")
    return out


def watch_overhead(streams: int, tokens: int, per_stream: int, rounds: int = 8) -> list[str]:
    """The live watch (`infbench run`'s default) on and off, in alternating order round by
    round, against the same server: its ticks read the pools' open exchanges and counters."""
    n_req = streams * per_stream
    rows = []
    with sse_server("--burst", "1") as url:
        asyncio.run(bare_reader(url, streams, 1, tokens))  # warm the server
        for i in range(rounds):
            result = {}
            for mode in (("off", "on") if i % 2 == 0 else ("on", "off")):
                result[mode] = infbench_client(url, streams, n_req, tokens, watch=mode == "on")
            rows.append(result)
    out = [f"### Live watch on and off: {streams} streams x {tokens} tokens, {n_req} requests per run, "
           "server writes 1 event per stream between yields\n",
           "Alternating order round by round; the watch ticks every 0.1 s (engine stop, error "
           "burst; no trigger fires against this healthy server).\n",
           "| round | off: content chunks/s | on: content chunks/s | on/off | off: CPU s | on: CPU s | "
           "triggers |", "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    ratios, cpu = [], []
    for i, r in enumerate(rows, 1):
        off, on = r["off"], r["on"]
        a, b = off["content_chunks"] / off["wall_s"], on["content_chunks"] / on["wall_s"]
        ratios.append(b / a)
        cpu.append(on["cpu_s"] / off["cpu_s"])
        out.append(f"| {i} | {a:,.0f} | {b:,.0f} | {b / a:.3f} | {off['cpu_s']:.2f} | {on['cpu_s']:.2f} | "
                   f"{on['triggers']:.0f} |")
    out.append(f"\nMedian throughput ratio on/off **{np.median(ratios):.3f}** "
               f"(min {min(ratios):.3f}, max {max(ratios):.3f}); median CPU-seconds ratio "
               f"{np.median(cpu):.3f}.\n")
    return out


def _spread_ms(times: np.ndarray) -> np.ndarray:
    """ITL as infbench defines it, over write (or read) times: equal times are one write, whose
    gap since the previous one is spread over its events; the first write has none."""
    t, n = np.unique(times, return_counts=True)
    return np.repeat(np.diff(t) / n[1:], n[1:]) / 1e6


def ttft_overhead(streams: int, tokens: int, itl_ms: float, neighbour: bool = False) -> list[str]:
    with busy_neighbour(neighbour), sse_server("--ttft-ms", "50", "--itl-ms", str(itl_ms), "--log-timing") as url, \
            tempfile.TemporaryDirectory() as d:
        con = open_store(Path(d) / "t.duckdb")
        t0 = time.monotonic_ns()
        create_run(con, run_id="t", config={}, target_url=url, model=MODEL, endpoint="completions",
                   t0_monotonic_ns=t0)
        writer = BatchWriter(con, "t")
        settings = RunSettings(url=url, endpoint="completions", model=MODEL,
                               arrivals=Arrivals("closed", concurrency=streams), num_requests=streams * 2)
        wl = Synthetic(LengthDist.parse("64", "in"), LengthDist.parse(str(tokens), "out"), TokenModel())
        runner = Runner(settings, wl, writer, t0)
        run_timed(runner.run())
        writer.close()
        t0 = runner.t0_ns  # the runner restarts its clock once connections are open
        truth = json.loads(request("GET", url + "/_log", timeout_s=30).body)
        arrivals = json.loads(request("GET", url + "/_arrivals", timeout_s=30).body)
        rows = con.execute("SELECT server_request_id, send_ns + ?, first_content_ns + ?, request_idx FROM requests "
                           "WHERE error_class IS NULL", [t0, t0]).fetchall()
        itl = con.execute("SELECT r.server_request_id, list(i.itl_ms ORDER BY i.seq), list(i.raw_itl_ms ORDER BY i.seq) "
                          "FROM itl i JOIN requests r USING (run_id, request_idx) WHERE r.error_class IS NULL "
                          "GROUP BY ALL").fetchall()
        con.close()
    server_itl = np.concatenate([_spread_ms(np.array(truth[rid])) for rid, _, _ in itl])
    spread = np.array([v for _, vals, _ in itl for v in vals if v is not None])
    raw = np.array([v for _, _, vals in itl for v in vals if v is not None])
    way_out = np.array([(arrivals[rid] - send) / 1e6 for rid, send, _, _ in rows])
    way_back = np.array([(first - truth[rid][0]) / 1e6 for rid, _, first, _ in rows])
    server = np.array([(truth[rid][0] - arrivals[rid]) / 1e6 for rid, _, _, _ in rows])
    ttft = np.array([(first - send) / 1e6 for _, send, first, _ in rows])
    first_wave = np.array([idx < streams for *_, idx in rows])

    def row(name: str, v: np.ndarray) -> str:
        return f"| {name} | " + " | ".join(f"{x:.2f}" for x in np.percentile(v, [50, 90, 99, 100])) + " |"

    return [
        f"### TTFT overhead and ITL at {streams} concurrent streams (server: 50 ms TTFT, {itl_ms:g} ms ITL, "
        f"{tokens} tokens, {streams * 1000 / itl_ms:,.0f} events/s{', beside a busy-loop process' if neighbour else ''})\n",
        "Client-added TTFT = measured TTFT minus the server's own (its first write minus the moment it had "
        "read the request), split into the way out (send timestamp to the server having read the request: "
        "request setup, socket, the server's accept/read) and the way back (server's first write to "
        "infbench's timestamp of it). Same CLOCK_MONOTONIC, server in its own process. The way out "
        "ends when the server's handler has read the request, so it holds the server's own queueing "
        "when all streams send at once (the first wave).\n",
        "| ms | p50 | p90 | p99 | max |", "| --- | ---: | ---: | ---: | ---: |",
        row("client-added TTFT", way_out + way_back), row("way out", way_out),
        row(f"way out, first {streams} (sent together at the start)", way_out[first_wave]),
        row("way out, the rest", way_out[~first_wave]), row("way back (stamp delay)", way_back),
        row("server's own TTFT", server), row("measured TTFT", ttft),
        f"\n{len(rows)} requests. For comparison, the issue measured guidellm adding ~1 s and AIPerf ~300 ms at p99.\n",
        "ITL against the server's write log, both by infbench's definition (a write's or read's gap spread over "
        "its events) and per event (vLLM's, 0 ms inside a read):\n",
        "| ms | p50 | p90 | p99 | max |", "| --- | ---: | ---: | ---: | ---: |",
        row("server's writes, spread", server_itl), row("infbench ITL (spread)", spread),
        row("infbench per-event gaps (raw)", raw),
        f"\n{np.mean(raw == 0):.0%} of per-event gaps are 0 ms (events that shared a read).\n",
    ]


def _bare_cpu(url: str, per_stream: int, tokens: int, prompt: str) -> tuple[float, float]:
    """Wall and CPU seconds of one bare-reader stream (CPU of this process: the reader)."""
    cpu = time.process_time()
    wall, _ = asyncio.run(bare_reader(url, 1, per_stream, tokens, prompt))
    return wall, time.process_time() - cpu


def long_stream(tokens: int, short: int = 128) -> list[str]:
    """Does a long prompt and a long output cost more per chunk than short ones?

    One stream at a time either way: one request with a ~`tokens`-word prompt and `tokens`
    output tokens, against `tokens / short` requests of 16-word prompts and `short` tokens,
    one after another. With a single stream the wall-clock rate is a ping-pong with the
    server (a client that reads sooner makes the server send smaller writes), so the cost is
    read from the client's own CPU time per chunk.
    """
    with sse_server() as url:
        prompt = " the" * tokens
        asyncio.run(bare_reader(url, 1, 1, 64))  # warm the server
        rows = []
        for _ in range(3):
            bl = _bare_cpu(url, 1, tokens, prompt)
            bs = _bare_cpu(url, tokens // short, short, " the" * 16)
            il = infbench_client(url, 1, 1, tokens, input_tokens=tokens)
            is_ = infbench_client(url, 1, tokens // short, short, input_tokens=16)
            rows.append((bl, bs, (il["wall_s"], il["cpu_s"]), (is_["wall_s"], is_["cpu_s"])))
    us = 1e6 / tokens  # per chunk
    out = [f"### Long streams: one {tokens:,}-token output after a ~{tokens:,}-word prompt, against "
           f"{tokens // short} requests of {short} tokens (16-word prompts), one stream at a time\n",
           "Client CPU microseconds per content chunk (wall-clock chunks/s in brackets). The long stream "
           "must not cost more per chunk than the short ones (peers' buffers grow with the stream).\n",
           "| round | bare reader, long | bare reader, short | infbench, long | infbench, short |",
           "| ---: | ---: | ---: | ---: | ---: |"]
    for i, row in enumerate(rows, 1):
        out.append(f"| {i} | " + " | ".join(f"{cpu * us:.1f} ({tokens / wall:,.0f}/s)" for wall, cpu in row) + " |")
    ratio = np.median([r[2][1] / r[3][1] for r in rows])
    bare_ratio = np.median([r[0][1] / r[1][1] for r in rows])
    out.append(f"\nMedian CPU per chunk, long / short: infbench {ratio:.2f}, bare reader {bare_ratio:.2f}. "
               f"infbench's CPU includes parsing and storing every chunk and the store's setup.\n")
    return out


def memory(chunk_targets: list[int]) -> list[str]:
    out = ["### Memory stays flat: RSS of `infbench run` by chunks recorded\n",
           "`during load` is the largest resident size the client sampled while requests were in flight "
           "(client_samples.rss_bytes); `process peak` also covers the summary queries DuckDB runs over "
           "the whole run at the end.\n",
           "| chunks recorded | requests | wall s | RSS during load (MiB) | process peak RSS (MiB) |",
           "| ---: | ---: | ---: | ---: | ---: |"]
    tokens = 512
    with sse_server() as url:
        for target in chunk_targets:
            n = target // tokens
            with tempfile.TemporaryDirectory() as d:
                code = (
                    "import resource, subprocess, sys\n"
                    "from infbench.cli import main\n"
                    "sys.argv = ['infbench'] + sys.argv[1:]\n"
                    "try:\n    main()\nexcept SystemExit:\n    pass\n"
                    "print('MAXRSS', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\n"
                )
                t = time.perf_counter()
                r = subprocess.run([sys.executable, "-c", code, "run", "--url", url, "--db", f"{d}/m.duckdb",
                                    "--arrival", "closed", "--concurrency", "64", "--num-requests", str(n),
                                    "--input-tokens", "16", "--output-tokens", str(tokens), "--quiet", "--json"],
                                   cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
                wall = time.perf_counter() - t
                rss = [ln for ln in r.stderr.splitlines() if ln.startswith("MAXRSS")]
                chunks, load_rss = duckdb.connect(f"{d}/m.duckdb", read_only=True).execute(
                    "SELECT (SELECT count(*) FROM chunks), (SELECT max(rss_bytes) FROM client_samples)").fetchone()
                out.append(f"| {chunks:,} | {n:,} | {wall:.1f} | {load_rss / 2**20:.0f} | "
                           f"{int(rss[0].split()[1]) / 1024:.0f} |")
    out.append("")
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="smaller runs (smoke test of the script)")
    p.add_argument("--skip-memory", action="store_true")
    p.add_argument("--only-timing", action="store_true", help="only the TTFT/ITL sections (use with --out)")
    p.add_argument("--only-exposition", action="store_true",
                   help="only the live exposition on/off comparison (use with --out)")
    p.add_argument("--only-watch", action="store_true",
                   help="only the live watch on/off comparison (use with --out)")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/client_ceiling.md")
    args = p.parse_args()
    per_stream = 4 if args.quick else 24
    title = ("# Client timing: TTFT and ITL against the server's send log" if args.only_timing else
             "# Client ceiling: infbench vs a bare aiohttp reader and a vLLM bench-serve-style client")
    flags = "".join(f" {a}" for a in sys.argv[1:])
    lines = [title, "", f"Command: `python benchmarks/bench_client_ceiling.py{flags}`  ",
             f"Machine: {machine()}  ",
             f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", "",
             "The mock server's `--burst` sets how many events it writes per stream before it lets "
             "the other streams run: 1 is an engine emitting one token per stream per step (most "
             "socket reads then carry one or two events, and every client is bound by the cost of "
             "a read); 128 writes a whole stream at once, as an ASGI generator that never awaits "
             "does. Server and clients share this machine's 2 cores, so rates swing from run to "
             "run; the ratios within a round are the comparison.", ""]
    sections = [lambda: ceiling(64, 128, per_stream, 1), lambda: ceiling(64, 128, per_stream, 16),
                lambda: ceiling(64, 128, per_stream, 128),
                lambda: ttft_overhead(256, 32 if args.quick else 64, 25.0),
                lambda: ttft_overhead(256, 32 if args.quick else 64, 10.0),
                lambda: ttft_overhead(256, 32 if args.quick else 64, 10.0, neighbour=True),
                lambda: long_stream(4096 if args.quick else 32768),
                lambda: exposition_unit_costs(128), lambda: exposition_overhead(64, 128, per_stream)]
    if args.only_timing:  # the TTFT and ITL accuracy sections alone
        sections = sections[3:6]
    if args.only_exposition:
        title = "# Client ceiling with the live exposition (--metrics-port) on and off"
        sections = [lambda: exposition_unit_costs(128), lambda: exposition_overhead(64, 128, per_stream)]
        lines[0] = title
    if args.only_watch:
        lines[0] = "# Client ceiling with the live watch on and off"
        sections = [lambda: watch_unit_cost(), lambda: watch_overhead(64, 128, per_stream)]
    else:
        sections += [lambda: watch_unit_cost(), lambda: watch_overhead(64, 128, per_stream)]
    if not args.skip_memory and not (args.only_timing or args.only_exposition or args.only_watch):
        sections.append(lambda: memory([100_000, 500_000] if args.quick else [1_000_000, 5_000_000]))
    for section in sections:
        part = section()
        print("\n".join(part), flush=True)
        lines += part
    lines.append(f"Peak RSS of this benchmark process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
