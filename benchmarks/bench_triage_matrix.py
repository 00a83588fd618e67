"""Benchmark: how often `infbench diagnose RUN`'s headline names the injected cause, and how
often a healthy run raises a false alarm.

    python benchmarks/bench_triage_matrix.py [--repeat N]

Each fault the bundled engine injects, at parameters no test uses, through the commands a
user types (`infbench run` with the live watch on, then `infbench diagnose last --json`);
healthy runs quiet and beside a busy-loop process. A case is right when the headline's
verdict is one of the causes the fault makes (a periodic stall is `periodic_engine_stall`,
or `engine_wide_stall` when the run held too few periods to prove it). Results go to
benchmarks/results/triage_matrix.md with the machine.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine_info import describe
from neighbour import busy_neighbour

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.e2e.engine_process import running_engine  # noqa: E402

OUT = ROOT / "benchmarks" / "results" / "triage_matrix.md"


def closed(n: int, conc: int, inp: str, out: str) -> list[str]:
    return ["--arrival", "closed", "--concurrency", str(conc), "--num-requests", str(n),
            "--input-tokens", inp, "--output-tokens", out]


def engine(*flags: str) -> list[str]:
    return [f"--engine-arg={f}" for f in ("--gpu", "H100-SXM", *flags)]


# name -> (run arguments, expected headline verdicts (empty: no problem), fleet faults)
CASES: dict[str, tuple[list[str], set[str], list[tuple[str, ...]] | None]] = {
    "periodic stall every 0.9 s": (
        [*closed(85, 5, "uniform:250:2200", "uniform:25:75"),
         *engine("--fault", "periodic-stall:every_s=0.9,duration_ms=115")],
        {"periodic_engine_stall", "engine_wide_stall"}, None),
    "periodic stall every 61 steps": (
        ["--rate", "8", "--num-requests", "80", "--input-tokens", "uniform:300:2500",
         "--output-tokens", "uniform:20:110", *engine("--fault", "periodic-stall:every_steps=61,duration_ms=95")],
        {"periodic_engine_stall", "engine_wide_stall"}, None),
    "slow device x1.9": (
        [*closed(28, 7, "uniform:120:260", "110"), *engine("--fault", "slow-device:factor=1.9")],
        # the stalls playbook's name for it, or the mbu playbook's (a device below its bandwidth)
        {"uniform_slowdown", "decode_mbu"}, None),
    "memory growth 1.3 MB/request": (
        [*closed(210, 11, "76", "26"), *engine("--fault", "memory-growth:bytes_per_request=1310720")],
        {"memory_growth_per_request"}, None),
    "hang at step 133": (
        [*closed(11, 4, "uniform:50:140", "85"), "--timeout", "4", *engine("--fault", "hang:at_step=133")],
        {"engine_stopped"}, None),
    "hang on rank 1 of 2 (torch, gloo)": (
        [*closed(8, 2, "30", "18"), "--timeout", "12", "--quiet",
         *[f"--engine-arg={a}" for a in ("--executor", "torch", "--tensor-parallel-size", "2",
                                          "--collective-timeout-s", "4", "--fault", "hang:rank=1,at_step=29")]],
        # without --dump-dir the capture holds stacks only: rank 1 named outside the collective
        {"rank_behind", "rank_outside_collective"}, None),
    # then `infbench probe links --run last` on the host, the same link slowed (--inject)
    "slow link to rank 1 of 2 x3 (torch, gloo) + link probe": (
        [*closed(8, 2, "30", "40"),
         *[f"--engine-arg={a}" for a in ("--executor", "torch", "--tensor-parallel-size", "2",
                                          "--fault", "slow-link:rank=1,factor=3")]],
        {"slow_link"}, None),
    "KV pool exhausted (160 blocks)": (
        ["--arrival", "closed", "--concurrency", "13", "--duration", "6", "--input-tokens", "104",
         "--output-tokens", "300", *engine("--num-gpu-blocks", "160", "--block-size", "16")],
        {"kv_cache_exhausted", "preemption_stall"}, None),
    "throttled GPU in a 3-replica fleet": (
        ["--rate", "24", "--num-requests", "130", "--input-tokens", "uniform:150:450",
         "--output-tokens", "uniform:35:85", "--seed", "9"],
        {"replica_slower"}, [(), (), ("--fault", "throttle:reason=thermal,sm_clock_mhz=760")]),
    "healthy": ([*closed(64, 6, "uniform:80:240", "uniform:45:110"), *engine()], set(), None),
    "healthy beside a busy neighbour": (
        [*closed(64, 6, "uniform:80:240", "uniform:45:110"), *engine()], set(), None),
}


def infbench(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "infbench", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


def one(name: str, args: list[str], fleet: list[tuple[str, ...]] | None, db: Path) -> dict:
    t = time.perf_counter()
    with contextlib.ExitStack() as stack:
        stack.enter_context(busy_neighbour("busy" in name))
        urls: list[str] = []
        for i, flags in enumerate(fleet or []):
            e = stack.enter_context(running_engine(*flags))
            urls += ["--url", f"r{i}={e.url}"]
        run = infbench("run", "--db", str(db), "--quiet", "--json", *urls, *args)
    if "link probe" in name:
        infbench("probe", "links", "--ranks", "4", "--sizes", "64K,256K", "--repeats", "2",
                 "--iters", "4", "--warmup", "1", "--inject", "slow-link:rank=1,factor=2.5",
                 "--run", "last", "--db", str(db))
    diag = infbench("diagnose", "last", "--db", str(db), "--json")
    took = time.perf_counter() - t
    try:
        doc = json.loads(diag.stdout)
    except json.JSONDecodeError:
        return {"verdict": f"diagnose failed (exit {diag.returncode}): {diag.stderr.strip()[-200:]}",
                "severity": None, "took": took, "watch": [], "run_rc": run.returncode}
    head = doc["context"]["headline"]
    try:
        watch = [w["kind"] for w in json.loads(run.stdout).get("watch", [])]
    except json.JSONDecodeError:
        watch = []
    return {"verdict": head["verdict"], "severity": head["severity"], "text": head["text"],
            "took": took, "watch": watch, "run_rc": run.returncode}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--only", default=None, help="run only the cases whose name contains this")
    args = p.parse_args()
    rows, right, total, alarms, healthy = [], 0, 0, 0, 0
    with tempfile.TemporaryDirectory() as d:
        for rep in range(args.repeat):
            for name, (run_args, expect, fleet) in CASES.items():
                if args.only and args.only not in name:
                    continue
                r = one(name, run_args, fleet, Path(d) / f"{rep}-{len(rows)}.duckdb")
                ok = (r["verdict"] in expect) if expect else r["verdict"] is None
                total += 1
                right += ok
                if not expect:
                    healthy += 1
                    alarms += not ok
                text = str(r.get("text") or "").replace("|", "/")
                rows.append(f"| {name} | {', '.join(sorted(expect)) or 'no problem found'} | "
                            f"{r['verdict'] or 'no problem found'}: {text} | {'yes' if ok else '**no**'} | "
                            f"{', '.join(r['watch']) or '-'} | {r['took']:.0f} |")
                print(rows[-1], flush=True)
    lines = ["# Triage: the headline against the injected cause", "",
             f"Command: `python benchmarks/bench_triage_matrix.py{''.join(' ' + a for a in sys.argv[1:])}`  ",
             f"Machine: {describe('')}  ", f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
             "", "Each case: `infbench run` (live watch on) with the fault at parameters no test uses, "
             "then `infbench diagnose last --json`.", "",
             "| case | expected headline | headline | right | live watch triggers | seconds |",
             "| --- | --- | --- | --- | --- | ---: |", *rows, "",
             f"Right: **{right} of {total}**; false alarms on healthy runs: **{alarms} of {healthy}**."]
    OUT.write_text("\n".join(lines) + "\n")
    print(f"right {right}/{total}, false alarms {alarms}/{healthy}; written to {OUT}")


if __name__ == "__main__":
    main()
