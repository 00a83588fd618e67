"""Benchmark: how long `infbench --help` and `infbench version` take to answer.

Each command is started as a fresh process, interleaved round by round with the floor it
cannot beat (a bare `python -c pass`, and `import typer`, which every typer CLI pays), so a
busy machine slows all of them alike; the medians and their ratios to the floor are written.
A verb's own `--help` (`infbench run --help`) loads that verb's stack and is shown for contrast.

Run: python benchmarks/bench_startup.py [--rounds N]  (writes benchmarks/results/startup.md)
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

from machine_info import describe

OUT = Path(__file__).parent / "results" / "startup.md"
ROOT = Path(__file__).resolve().parents[1]

CASES = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "python -c 'import typer'": [sys.executable, "-c", "import typer"],
    "infbench version": [sys.executable, "-m", "infbench", "version"],
    "infbench --help": [sys.executable, "-m", "infbench", "--help"],
    "infbench run --help": [sys.executable, "-m", "infbench", "run", "--help"],
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    rounds = ap.parse_args().rounds
    times: dict[str, list[float]] = {k: [] for k in CASES}
    for _ in range(rounds):
        for name, cmd in CASES.items():
            t = time.perf_counter()
            subprocess.run(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           check=True)
            times[name].append(time.perf_counter() - t)
    floor = statistics.median(times["python -c pass"])
    lines = ["# Start-up time", "", f"Machine: {describe()}", "",
             f"{rounds} rounds, commands interleaved; wall time of a fresh process.", "",
             "| command | median s | p90 s | ratio to `python -c pass` |", "| --- | --- | --- | --- |"]
    for name, ts in times.items():
        ts.sort()
        med, p90 = statistics.median(ts), ts[int(0.9 * (len(ts) - 1))]
        lines.append(f"| `{name}` | {med:.3f} | {p90:.3f} | {med / floor:.1f}x |")
    text = "\n".join(lines) + "\n"
    OUT.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
