"""`infbench diagnose hang` on large Flight Recorder captures, beside PyTorch's own analyzer.

For N ranks x E entries per rank (NCCL-format dumps built by tests/support/fr_dumps.py: a
decode-like rhythm of broadcast + 3 all-reduces, one rank one collective behind at the end),
both tools read the same folder in this process, one after the other:
- infbench: read every dump with the restricted unpickler, store the capture (DuckDB), then
  diagnose it; timed per phase;
- PyTorch: `torch.distributed.flight_recorder` (fr_trace's read_dir + build_db, plain
  pickle.load), its log silenced.
Both must name the same stuck sequence id and missing rank. Also timed: plain pickle.load
against the restricted unpickler on the same files (what refusing globals costs).
Results go to benchmarks/results/diagnose_hang.md. Usage: python benchmarks/bench_diagnose_hang.py
"""

from __future__ import annotations

import logging
import pickle
import sys
import tempfile
import time
from pathlib import Path

from machine_info import describe

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from infbench.store import open_store  # noqa: E402
from playbooks.hang import diagnose_hang  # noqa: E402
from probes.hang import capture_dumps, write_capture  # noqa: E402
from probes.hang.frdump import parse_dump  # noqa: E402
from tests.support.fr_dumps import write_dumps  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "diagnose_hang.md"
SIZES = [(8, 2000), (64, 2000), (256, 2000)]
AR, BC = ("all_reduce", [8, 4096], "BFloat16"), ("broadcast", [1], "Long")


def build(folder: Path, ranks: int, entries: int) -> int:
    """Dumps of `entries` collectives per rank (the last 2000 of a longer run, as a ring
    buffer keeps them); the last rank misses the final one. Returns the stuck seq id."""
    ops = ([BC, AR, AR, AR] * (entries // 4 + 1))[:entries]
    first = 10_000  # a buffer that has wrapped: sequence ids do not start at 1
    slow = ranks - 1
    created = time.time_ns() - 60 * 10**9
    per = {r: (ops, entries - 1) for r in range(ranks)}
    per[slow] = (ops[:-1], entries - 1)
    write_dumps(folder, ranks, per, created, first_seq=first)
    return first + entries - 1


def ours(folder: Path, db: Path) -> tuple[dict[str, float], tuple[int, str]]:
    t = {}
    t0 = time.perf_counter()
    cap = capture_dumps(folder)
    t["read"] = time.perf_counter() - t0
    con = open_store(db)
    t0 = time.perf_counter()
    write_capture(con, cap)
    t["store"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    d = diagnose_hang(con, cap.capture_id)
    t["diagnose"] = time.perf_counter() - t0
    con.close()
    f = next(f for f in d.findings if f.verdict == "rank_behind")
    p = next(e.values for e in f.evidence if e.name == "progress_per_rank")
    return t, (int(p["stuck_seq"]), str(p["behind"]))


def theirs(folder: Path) -> tuple[float, tuple[int, str]]:
    from torch.distributed.flight_recorder.components.builder import build_db
    from torch.distributed.flight_recorder.components.config_manager import JobConfig
    from torch.distributed.flight_recorder.components.loader import read_dir
    logging.getLogger("Flight Recorder").setLevel(logging.ERROR)
    t0 = time.perf_counter()
    args = JobConfig().parse_args([str(folder), "--prefix", "rank_"])
    details, version = read_dir(args)
    db = build_db(details, args, version)
    dt = time.perf_counter() - t0
    c = next(c for c in db.collectives if c.missing_ranks)
    return dt, (int(c.collective_seq_id), ",".join(map(str, sorted(c.missing_ranks))))


def unpickle_cost(folder: Path) -> tuple[float, float]:
    files = sorted(folder.glob("rank_*"))
    blobs = [f.read_bytes() for f in files]
    t0 = time.perf_counter()
    for b in blobs:
        pickle.loads(b)
    plain = time.perf_counter() - t0
    t0 = time.perf_counter()
    for i, b in enumerate(blobs):
        parse_dump(b, f"rank_{i}")
    return plain, time.perf_counter() - t0


def main() -> None:
    import os
    rows = []
    for ranks, entries in SIZES:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp) / "dumps"
            stuck = build(folder, ranks, entries)
            mb = sum(f.stat().st_size for f in folder.iterdir()) / 1e6
            t, ours_v = ours(folder, Path(tmp) / "s.duckdb")
            their_t, their_v = theirs(folder)
            plain, restricted = unpickle_cost(folder)
            assert ours_v == their_v == (stuck, str(ranks - 1)), (ours_v, their_v, stuck)
            rows.append((ranks, entries, mb, t, their_t, plain, restricted, ours_v))
            print(ranks, entries, f"{mb:.1f} MB", {k: round(v, 2) for k, v in t.items()},
                  f"pytorch {their_t:.2f} s", f"unpickle {plain:.2f} vs {restricted:.2f} s", flush=True)
    lines = [
        "# `infbench diagnose hang` on large captures, beside PyTorch's analyzer",
        "",
        f"Machine: {describe()}. Load average at the end: {os.getloadavg()[0]:.1f} "
        "(the machine is shared with other agents' test runs).",
        "",
        "`python benchmarks/bench_diagnose_hang.py`. N ranks x E entries (NCCL-format dumps, "
        "sequence ids from 10,000 as in a wrapped ring buffer, the last rank one collective "
        "behind). infbench: read (restricted unpickler + checks), store (DuckDB), diagnose. "
        "PyTorch: `torch.distributed.flight_recorder` read_dir + build_db on the same folder. "
        "Both named the same stuck sequence id and missing rank in every row.",
        "",
        "| ranks | entries/rank | dumps MB | infbench read s | store s | diagnose s | infbench total s | PyTorch analyzer s | pickle.loads s | restricted parse s | verdict (seq, rank) |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for ranks, entries, mb, t, their_t, plain, restricted, v in rows:
        lines.append(f"| {ranks} | {entries} | {mb:.1f} | {t['read']:.2f} | {t['store']:.2f} | "
                     f"{t['diagnose']:.2f} | {sum(t.values()):.2f} | {their_t:.2f} | {plain:.2f} | "
                     f"{restricted:.2f} | #{v[0]}, rank {v[1]} |")
    RESULTS.write_text("\n".join(lines) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
