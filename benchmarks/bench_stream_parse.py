"""Parsing a finished stream: CPU per request, compact JSON against Python-style spaced JSON.

    python benchmarks/bench_stream_parse.py [--base REV] [--rounds 5] [--tokens 128]

The parser runs after each request, once per stream (`infbench.loadgen.run.stream_rows.parse_now`,
the array parser on the common shape). Bodies: `--tokens` completion events, a finish event
and `[DONE]`, one event per stamped read, written either as vLLM writes JSON (`{"text":" a"}`)
or as Python's `json.dumps` does (`{"text": " a"}`). Each round times both bodies in a fresh
process per build (this working tree and `--base`, that revision's tree as bench_hot_path.py makes it),
alternating the order; the table gives the median per build and body.
Results go to benchmarks/results/stream_parse.md (or `--out`).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_hot_path import materialize
from machine_info import describe

ROOT = Path(__file__).resolve().parents[1]

CHILD = r'''
import json, sys, timeit
from infbench.loadgen.http.client import RawResponse
from infbench.loadgen.run.stream_rows import parse_now

tokens, compact = int(sys.argv[1]), sys.argv[2] == "1"
sep = (",", ":") if compact else None
def ev(text, finish):
    obj = {"id": "cmpl-1", "object": "text_completion", "created": 1733000000, "model": "m",
           "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish}]}
    return b"data: " + json.dumps(obj, separators=sep).encode() + b"\n\n"
events = [ev(" tok", None) for _ in range(tokens)] + [ev("", "length"), b"data: [DONE]\n\n"]
log, off = [], 0
for i, e in enumerate(events):
    log += [1_000_000 + 1000 * i, off, off + len(e)]
    off += len(e)
raw = RawResponse(send_ns=0, status=200, reads=[b"".join(events)], read_ns=[log[-3]], recv_log=log, end_ns=log[-3])
assert parse_now(raw, False).num_content == tokens
n = 400
print(json.dumps(min(timeit.repeat(lambda: parse_now(raw, False), number=n, repeat=5)) / n))
'''


def one(tree: Path, tokens: int, compact: bool) -> float:
    out = subprocess.run([sys.executable, "-c", CHILD, str(tokens), "1" if compact else "0"], cwd=tree,
                         env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
                         check=True, timeout=300)
    return float(out.stdout) * 1e6


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", default="HEAD", help="revision to compare with (default: HEAD)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "stream_parse.md")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="infbench-parse-") as tmp:
        builds = {"this tree": ROOT, f"base {args.base}": materialize(args.base, Path(tmp))}
        times: dict[tuple[str, bool], list[float]] = {(b, c): [] for b in builds for c in (True, False)}
        for r in range(args.rounds):
            order = list(builds.items()) if r % 2 == 0 else list(builds.items())[::-1]
            for name, tree in order:
                for compact in (True, False):
                    times[(name, compact)].append(one(tree, args.tokens, compact))
            print(f"round {r + 1}: " + ", ".join(f"{b} {'compact' if c else 'spaced'} {v[-1]:.0f} µs"
                                                 for (b, c), v in times.items()), file=sys.stderr)
    lines = ["# Stream parse: CPU per finished stream, compact and spaced JSON", "",
             f"Command: `python benchmarks/bench_stream_parse.py {' '.join(sys.argv[1:])}` · "
             f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC  ",
             f"Machine: {describe()}  ",
             f"One stream of {args.tokens} completion events, a finish event and [DONE], one event per stamped read; "
             "best of 5 x 400 calls per process, median over rounds.", "",
             "| build | compact JSON: µs per stream (per event) | spaced JSON: µs per stream (per event) |",
             "| --- | ---: | ---: |"]
    events = args.tokens + 2
    for b in builds:
        c, s = statistics.median(times[(b, True)]), statistics.median(times[(b, False)])
        lines.append(f"| {b} | {c:.0f} ({c / events:.2f}) | {s:.0f} ({s / events:.2f}) |")
    text = "\n".join(lines) + "\n"
    print(text)
    args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
