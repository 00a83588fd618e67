"""Does the HTTP layer keep up with the engine? Client-seen ITL vs the engine's own steps.

Starts `python -m reference_engine` (sim executor) as a subprocess, then for each
concurrency runs that many streaming completions at once (EOS ignored, fixed output
length) with an aiohttp client that timestamps every SSE chunk. For the same time window it
reads the engine's step log (/engine/steps) and compares:

* the median gap between a request's consecutive chunks as the client sees it, with
* the median duration of the engine's decode steps (one token per sequence per step).

If the server's per-token work (thread hop, detokenizing, JSON, writes) were a bottleneck,
the client gap would exceed the step time. Results go to
benchmarks/results/server_streaming.md with the machine description.

    python benchmarks/bench_server_streaming.py [--concurrency 1 32 128 --output-len 128]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from machine_info import describe

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "server_streaming.md"
MODEL = "qwen2.5-3b-instruct"


@dataclass
class Row:
    concurrency: int
    tokens: int
    wall_s: float
    client_itl_ms: float
    client_itl_p99_ms: float
    step_ms: float
    mean_batch: float


def start_engine(flags: list[str]) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, "-m", "reference_engine", "--port", "0", *flags],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if not line.startswith("INFO: serving on "):
        proc.kill()
        raise SystemExit(f"engine did not start: {line!r}")
    return proc, line.removeprefix("INFO: serving on ")


async def one_stream(session: aiohttp.ClientSession, url: str, output_len: int,
                     i: int) -> list[float]:
    body = {"model": MODEL, "prompt": f"request {i}: tell me a story", "stream": True,
            "max_tokens": output_len, "ignore_eos": True}
    times: list[float] = []
    async with session.post(url + "/v1/completions", json=body) as resp:
        resp.raise_for_status()
        async for raw in resp.content:
            line = raw.strip()
            if line.startswith(b"data: {"):
                times.append(time.monotonic())
    return times


async def run_level(url: str, concurrency: int, output_len: int) -> Row:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300)) as session:
        async with session.get(url + "/engine/steps?after=-1") as r:
            steps = (await r.json())["steps"]
        last_step = steps[-1]["step_id"] if steps else -1
        t0 = time.monotonic()
        streams = await asyncio.gather(*(one_stream(session, url, output_len, i)
                                         for i in range(concurrency)))
        wall = time.monotonic() - t0
        async with session.get(url + f"/engine/steps?after={last_step}") as r:
            steps = (await r.json())["steps"]
    gaps = [b - a for times in streams for a, b in zip(times, times[1:], strict=False)]
    decode = [s for s in steps if s["prefill_tokens"] == 0 and s["decode_seqs"] > 0]
    return Row(
        concurrency=concurrency, tokens=sum(len(t) for t in streams), wall_s=wall,
        client_itl_ms=statistics.median(gaps) * 1e3,
        client_itl_p99_ms=statistics.quantiles(gaps, n=100)[98] * 1e3,
        step_ms=statistics.median(s["end"] - s["start"] for s in decode) * 1e3,
        mean_batch=statistics.fmean(s["decode_seqs"] for s in decode))


def machine() -> str:
    return describe(f"aiohttp {aiohttp.__version__}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 32, 128])
    p.add_argument("--output-len", type=int, default=128)
    p.add_argument("--gpu", default="H100-SXM")
    args = p.parse_args()
    flags = ["--model", MODEL, "--gpu", args.gpu, "--max-model-len", "4096"]
    header = machine()
    proc, url = start_engine(flags)
    try:
        asyncio.run(run_level(url, 1, 8))  # warm-up: imports, first allocations
        rows = [asyncio.run(run_level(url, c, args.output_len)) for c in args.concurrency]
    finally:
        proc.terminate()
        proc.wait(10)
    lines = [
        "# Server streaming: client-seen inter-token gap vs engine step time", "",
        f"Command: `python benchmarks/bench_server_streaming.py --concurrency "
        f"{' '.join(map(str, args.concurrency))} --output-len {args.output_len} "
        f"--gpu {args.gpu}`", "",
        f"Machine: {header} (shared machine; the client runs on the same CPUs as the server).",
        "", f"Engine: sim executor, `{MODEL}` on {args.gpu}, flags `{' '.join(flags)}`; "
        f"{args.output_len} output tokens per request, EOS ignored, all requests sent at once.",
        "", "| concurrency | tokens | wall s | tokens/s | client ITL median ms | "
        "client ITL p99 ms | engine decode step median ms | mean decode batch | "
        "ITL / step |", "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        lines.append(f"| {r.concurrency} | {r.tokens} | {r.wall_s:.2f} | "
                     f"{r.tokens / r.wall_s:,.0f} | {r.client_itl_ms:.2f} | "
                     f"{r.client_itl_p99_ms:.2f} | {r.step_ms:.2f} | {r.mean_batch:.1f} | "
                     f"{r.client_itl_ms / r.step_ms:.2f} |")
    lines += ["", "ITL / step near 1 means the HTTP layer delivers each token as fast as the "
              "engine makes it; above 1, the server (or the client sharing its CPUs) is the "
              "bottleneck. Far below 1 with a large p99 means chunks arrive in bursts: "
              "the server or the client fell behind and several tokens came per read. A mean "
              "decode batch below the concurrency means requests were admitted over several "
              "steps (the client could not send them all at once) or finished at different "
              "steps."]
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(json.dumps({"written": str(RESULTS)}))


if __name__ == "__main__":
    main()
