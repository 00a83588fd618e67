"""Benchmark: `diagnose_stalls` on a synthetic store of ~1M content chunks.

Run: python benchmarks/bench_diagnose_stalls.py  (writes benchmarks/results/diagnose_stalls.md)
"""

from __future__ import annotations

import os
import platform
import tempfile
import time
from pathlib import Path

from infbench.store import open_store
from playbooks import diagnose_stalls
from playbooks.synthetic import write_timeline

OUT = Path(__file__).parent / "results" / "diagnose_stalls.md"


def main() -> None:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for requests, tokens in ((1000, 100), (4000, 250)):
            db = Path(tmp) / f"b{requests}.duckdb"
            con = open_store(db)
            t = time.perf_counter()
            write_timeline(con, requests=requests, concurrency=64, tokens=tokens, stall_every=50,
                           stall_ms=200, private={7: (40, 500.0), 900: (10, 800.0)})
            build = time.perf_counter() - t
            t = time.perf_counter()
            diag = diagnose_stalls(con, "last")
            took = time.perf_counter() - t
            con.close()
            rows.append((requests * tokens, build, took, ", ".join(diag.verdicts())))
            print(f"{requests * tokens:>9} chunks: build {build:.1f} s, diagnose {took:.2f} s -> {diag.verdicts()}")
    machine = f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
    lines = ["# diagnose stalls: time to diagnose a run", "",
             f"Machine: {machine} (shared with other work while measured).", "",
             "Synthetic store (playbooks/synthetic.py): 64 requests decoding in lockstep, a 200 ms "
             "engine-wide stall every 50 steps, two private stalls; engine step log present.", "",
             "| content chunks | build store (s) | diagnose (s) | verdicts |", "| ---: | ---: | ---: | --- |"]
    lines += [f"| {n:,} | {b:.1f} | {d:.2f} | {v} |" for n, b, d, v in rows]
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
