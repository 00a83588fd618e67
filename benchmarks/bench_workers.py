"""Chunks/s with 1, 2 and 4 worker processes, and each worker's clock uncertainty on loopback.

    python benchmarks/bench_workers.py [--rounds 3] [--skip-ray]

Against the zero-delay streaming server (tests/support/sse_server.py, its own process: every
request streams its tokens as fast as the socket takes them), `execute_run` is run with
`--workers` 1, 2 and 4 in turn, round by round, each time a closed loop of 64 streams x 128
tokens with every chunk stamped and stored. Per run: content chunks/s over the run's window
(first send to last chunk, from the store), the server's CPU over the same run (from
/proc/PID/stat: a single asyncio process cannot use more than one core, so near 100% means the
server, not the client, was the limit), and each worker's own CPU from `client_samples`.

Clock offsets: each process worker's pipe round trips, and (unless --skip-ray) a Ray cluster of
a head and one more node on loopback, whose actors are measured through Ray calls, as
`--ray` does; the uncertainty is half the fastest of 64 round trips.

Results go to benchmarks/results/workers.md with a description of the machine and its load.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import duckdb
from machine_info import describe

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from infbench.loadgen.arrivals import Arrivals  # noqa: E402
from infbench.loadgen.preflight import preflight  # noqa: E402
from infbench.loadgen.run.execute import execute_run  # noqa: E402
from infbench.loadgen.run.runner import RunSettings  # noqa: E402
from infbench.loadgen.workers.scale import Scale  # noqa: E402
from infbench.loadgen.workloads import Synthetic  # noqa: E402
from infbench.loadgen.workloads.lengths import LengthDist  # noqa: E402
from tests.support.process import SSE_SERVER  # noqa: E402

STREAMS, TOKENS, REQUESTS = 64, 128, 1024
_TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def host_busy() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs since boot, from /proc/stat."""
    vals = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = vals[3] + vals[4]  # idle + iowait
    return sum(vals) - idle, sum(vals)


def start_server() -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, str(SSE_SERVER), "--port", "0"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        if "serving on " in line:
            return proc, line.strip().split("serving on ", 1)[1]
    raise RuntimeError("the server did not start")


def one_run(url: str, server_pid: int, workers: int, db: Path, scale: Scale | None = None) -> dict[str, Any]:
    target = asyncio.run(preflight(url, "completions", None, None))
    settings = RunSettings(url=target.url, endpoint="completions", model=target.model,
                           arrivals=Arrivals("closed", concurrency=STREAMS), num_requests=REQUESTS,
                           sample_interval_s=0.5)
    wl = Synthetic(LengthDist.parse("64", "in"), LengthDist.parse(str(TOKENS), "out"), target.tokens)
    cpu0, wall0, host0 = cpu_s(server_pid), time.monotonic(), host_busy()
    r = execute_run(settings, wl, db, {"bench": "workers"}, scale=scale or Scale(workers=workers))
    wall = time.monotonic() - wall0
    server_cpu = cpu_s(server_pid) - cpu0
    host1 = host_busy()
    host_pct = 100.0 * (host1[0] - host0[0]) / max(1, host1[1] - host0[1])
    con = duckdb.connect(str(db), read_only=True)
    try:
        chunks, span_ns = con.execute(
            "SELECT count(*), max(c.t_ns) - (SELECT min(send_ns) FROM requests WHERE run_id = ?) "
            "FROM chunks c WHERE c.run_id = ? AND c.content", [r.run_id, r.run_id]).fetchone()
        client = con.execute("SELECT worker, avg(cpu_percent) FROM client_samples WHERE run_id = ? "
                             "GROUP BY 1 ORDER BY 1", [r.run_id]).fetchall()
        clocks = con.execute("SELECT worker, backend, node, clock_shared, clock_offset_ns, "
                             "clock_uncertainty_ns FROM run_workers WHERE run_id = ? ORDER BY worker",
                             [r.run_id]).fetchall()
    finally:
        con.close()
    window_s = span_ns / 1e9
    return {"workers": workers, "status": r.status.status, "chunks": chunks, "window_s": window_s,
            "chunks_per_s": chunks / window_s, "requests_per_s": r.summary["completed"] / window_s,
            # The server's CPU over the whole call (start-up included), shown against the run's
            # window: it is idle while workers start, so this is the share during the load.
            "server_cpu_pct": 100.0 * server_cpu / window_s, "wall_s": wall,
            "client_cpu": [c for _, c in client], "clocks": clocks,
            "client_bound": r.summary["client_bound"], "host_busy_pct": host_pct}


def ray_clocks(url: str, server_pid: int, db: Path) -> list[tuple[Any, ...]]:
    from infbench.loadgen.workers import ray_backend
    from tests.support.ray_cluster import ray_cluster, ray_env

    os.environ.update({k: v for k, v in ray_env().items() if k.startswith("RAY_")})
    with ray_cluster(extra_nodes=1, cpus_per_node=2) as address:
        nodes = ray_backend.connect(address)
        try:
            scale = Scale(workers=1, ray_address=address, ray_nodes=tuple(n["NodeID"] for n in nodes))
            res = one_run(url, server_pid, len(nodes), db, scale)
        finally:
            ray_backend.disconnect()
    return [(*c, res["chunks_per_s"]) for c in res["clocks"]]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--skip-ray", action="store_true")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "workers.md")
    args = p.parse_args()
    machine = describe(f"duckdb {duckdb.__version__}")
    tmp = Path(tempfile.mkdtemp(prefix="bench-workers-"))
    server, url = start_server()
    rows: list[dict[str, Any]] = []
    ray_rows: list[tuple[Any, ...]] = []
    try:
        for rnd in range(1, args.rounds + 1):
            for n in (1, 2, 4):
                res = one_run(url, server.pid, n, tmp / f"r{rnd}-w{n}.duckdb")
                res["round"] = rnd
                rows.append(res)
                print(f"round {rnd} workers {n}: {res['chunks_per_s']:,.0f} chunks/s, server CPU "
                      f"{res['server_cpu_pct']:.0f}%, clients {[round(c) for c in res['client_cpu']]}", flush=True)
        if not args.skip_ray:
            ray_rows = ray_clocks(url, server.pid, tmp / "ray.duckdb")
    finally:
        server.terminate()
        server.wait()
    load_end = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    write(args.out, machine, load_end, rows, ray_rows)
    print(f"wrote {args.out}")


def _median(xs: list[float]) -> float:
    s = sorted(xs)
    return s[len(s) // 2] if len(s) % 2 else (s[len(s) // 2 - 1] + s[len(s) // 2]) / 2


def limit(rows: list[dict[str, Any]]) -> str:
    """Which part limited the runs, from the measurements (not assumed)."""
    host = _median([r["host_busy_pct"] for r in rows])
    server = max(r["server_cpu_pct"] for r in rows)
    client = max(max(r["client_cpu"], default=0.0) for r in rows)
    if server >= 90:
        return (f"the server: it used up to {server:.0f}% of its one core, so more client "
                "processes could not make it stream faster.")
    if host >= 95:
        return (f"neither the server (at most {server:.0f}% of a core) nor any client process (at "
                f"most {client:.0f}%) alone: this host's CPUs were {host:.0f}% busy (median over the "
                "runs) with every tenant's processes, so each process got the share the scheduler "
                "gave it, and more workers only split the same share (plus their own start-up and "
                "the coordinator's work). The scaling itself needs a host with idle cores.")
    if client >= 90:
        return f"the client: a worker used up to {client:.0f}% of a core."
    return (f"not CPU on either side (server at most {server:.0f}%, clients {client:.0f}%, host "
            f"{host:.0f}% busy): the loopback round trips at this concurrency.")


def write(out: Path, machine: str, load_end: str, rows: list[dict[str, Any]], ray_rows: list[tuple[Any, ...]]) -> None:
    lines = [
        "# Worker processes (`--workers N`) and clock offsets (`--ray`)", "",
        "Command: `python benchmarks/bench_workers.py`  ",
        f"Machine: {machine}; load average at the end {load_end}  ",
        f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", "",
        f"Zero-delay server (tests/support/sse_server.py, one asyncio process), closed loop of {STREAMS} "
        f"streams x {TOKENS} tokens, {REQUESTS} requests per run, every chunk stamped and stored; the "
        "worker counts take turns within a round. Content chunks/s over the run's window (first send "
        "to last chunk). Server CPU is its user+system time over the run divided by that window "
        "(it cannot exceed about 100%: one process, one core); client CPU is each worker's own mean "
        "from `client_samples`. Host CPUs busy: the share of all CPUs' time spent by any process "
        "during the call (from /proc/stat), which says whether anything was left to take.", "",
        "| round | workers | content chunks/s | requests/s | server CPU (% of a core) | client CPU per worker (%) | client-bound | host CPUs busy (all processes, %) | wall s (start-up included) |",
        "| ---: | ---: | ---: | ---: | ---: | --- | --- | ---: | ---: |",
    ]
    for r in rows:
        lines.append(f"| {r['round']} | {r['workers']} | {r['chunks_per_s']:,.0f} | {r['requests_per_s']:,.0f} | "
                     f"{r['server_cpu_pct']:.0f} | {', '.join(f'{c:.0f}' for c in r['client_cpu']) or '-'} | "
                     f"{'yes' if r['client_bound'] else 'no'} | {r['host_busy_pct']:.0f} | {r['wall_s']:.1f} |")
    lines.append("")
    for n in (1, 2, 4):
        sel = [r for r in rows if r["workers"] == n]
        lines.append(f"- {n} worker(s): median {_median([r['chunks_per_s'] for r in sel]):,.0f} content chunks/s, "
                     f"server CPU median {_median([r['server_cpu_pct'] for r in sel]):.0f}% of a core.")
    lines += ["", "Where the limit was: " + limit(rows)]
    lines += ["", "## Clock offsets on loopback", "",
              "Offset = the worker's monotonic clock minus the coordinator's at the midpoint of the "
              "fastest of 64 round trips; uncertainty = half that round trip. One host: the clock is "
              "shared (the offset applied is 0), so the measured offset must lie within its "
              "uncertainty, which is what the method costs.", "",
              "| transport | worker | node | measured offset (µs) | uncertainty (µs) |", "| --- | ---: | --- | ---: | ---: |"]
    for r in rows:
        if r["round"] == 1:
            for w, backend, node, _shared, off, unc in r["clocks"]:
                lines.append(f"| {backend} pipe ({r['workers']} workers) | {w} | {node} | {off / 1e3:.1f} | {unc / 1e3:.1f} |")
    for w, backend, node, _shared, off, unc, _cps in ray_rows:
        lines.append(f"| {backend} calls | {w} | {str(node)[:12]} | {off / 1e3:.1f} | {unc / 1e3:.1f} |")
    out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
