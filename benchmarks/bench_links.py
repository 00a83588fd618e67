"""The link probe on this host: busbw per op and size on 4 gloo ranks, and how often the
slow-link verdicts name the right rank: `python benchmarks/bench_links.py [--trials N]`.
Writes benchmarks/results/links.md.

Part 1 sweeps all five collectives (4K..4M, 3 repeats of 10 timed calls) on 4 local gloo
ranks and writes time, algbw and busbw (median of the repeats, and the repeats' range).
Part 2 runs the probe with the bisection and the pair matrix, healthy and with
`slow-link` on different ranks and factors (one probe each, in one session so they share the
host's load), and records each verdict against the injected truth and the wall time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

from machine_info import describe

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from probes.links import ProbeConfig, SlowLink  # noqa: E402
from probes.links.launcher import run_probe  # noqa: E402

TRIALS: list[SlowLink | None] = [None, SlowLink(2, 3.0), SlowLink(0, 2.0), SlowLink(3, 1.5), SlowLink(1, 2.5),
                                 None, SlowLink(3, 4.0, peer=1)]


def sweep() -> tuple[list[str], float]:
    t = time.monotonic()
    res = run_probe(ProbeConfig(ranks=4, bisect=False, repeats=3, iters=10, warmup=3))
    wall = time.monotonic() - t
    by: dict[tuple[str, int], list[dict]] = {}
    for r in res.rows:
        by.setdefault((r["op"], r["bytes"]), []).append(r)
    lines = ["| op | size (B) | time (us), median | algbw (GB/s) | busbw (GB/s), median | busbw range over repeats | #wrong |",
             "| --- | ---: | ---: | ---: | ---: | --- | ---: |"]
    for (op, size), rows in sorted(by.items()):
        bus = [r["busbw_gbps"] for r in rows]
        lines.append(f"| {op} | {size:,} | {statistics.median(r['time_us'] for r in rows):,.0f} | "
                     f"{statistics.median(r['algbw_gbps'] for r in rows):.3f} | {statistics.median(bus):.3f} | "
                     f"{min(bus):.3f}-{max(bus):.3f} | {sum(r['wrong'] or 0 for r in rows)} |")
    return lines, wall


def verdicts(trials: list[SlowLink | None]) -> list[str]:
    lines = ["| injected | bisection verdict | pair matrix verdict | slow pairs named | right? | wall s |",
             "| --- | --- | --- | --- | --- | ---: |"]
    for inj in trials:
        t = time.monotonic()
        res = run_probe(ProbeConfig(ranks=4, ops=["all_reduce"], sizes=[262144], repeats=1, iters=3, warmup=1,
                                    pairwise=True, inject=inj))
        wall = time.monotonic() - t
        b, p = res.bisect, res.pairwise
        want = None if inj is None or inj.peer is not None else inj.rank
        right = b["rank"] in (want, None) and p["rank"] in (want, None)
        if want is not None:
            ok = "named" if b["rank"] == want and p["rank"] == want else "not named (no wrong rank)" if right else "WRONG"
        else:
            ok = "no rank named" if b["rank"] is None and p["rank"] is None else "WRONG"
        pairs = ", ".join(f"{a}-{c}" for a, c in p["slow_pairs"]) or "-"
        lines.append(f"| {inj or 'none'} | {b['status']} {'' if b['rank'] is None else b['rank']} | "
                     f"{p['status']} {'' if p['rank'] is None else p['rank']} | {pairs} | {ok} | {wall:.0f} |")
        print(lines[-1], flush=True)
    return lines


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=len(TRIALS), help="How many of the verdict trials to run.")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "links.md")
    a = ap.parse_args()
    import torch

    machine = describe(f"torch {torch.__version__}", "no GPU (gloo)")
    sweep_lines, sweep_wall = sweep()
    print("\n".join(sweep_lines), flush=True)
    v = verdicts(TRIALS[: a.trials])
    a.out.write_text("\n".join([
        "# `infbench probe links`: busbw on 4 local gloo ranks, and the slow-link verdicts",
        "", f"Machine: {machine}", "",
        "Run by `python benchmarks/bench_links.py`. The host is shared with other engineers' test runs "
        "(see the load average): gloo over loopback on 2 cores measures the CPUs and the scheduler more "
        "than any link, so these numbers are the probe's floor on this box, not a network's.", "",
        f"## Part 1: sweep, all ops, 4K-4M, 3 repeats x 10 timed calls ({sweep_wall:.0f} s with rank start-up)",
        "", *sweep_lines, "",
        "## Part 2: verdicts against the injected truth",
        "", "One probe per row (all_reduce 256K sweep, bisection at 1M, pair matrix at 1M; 20 timed calls per "
        "verdict measurement, 5-15 repeats). 'right?' is judged against the injection: a verdict may say it "
        "cannot tell, it must never name a wrong rank.", "", *v, "",
        "Load average at the end: " + ", ".join(f"{x:.2f}" for x in os.getloadavg()), ""]))
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
