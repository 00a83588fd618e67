"""Where each rank waits: the thread that issues its collectives, and the frame it sits in.

Which thread: the one whose pthread id the rank's latest Flight Recorder entry names
(`thread_id`, the same id py-spy and faulthandler print); else one with a torch.distributed
frame on its stack; else the thread named like the chosen one on the other ranks; else the
main thread (named MainThread, or whose OS id is the pid).
An engine's HTTP server often owns the main thread while the step loop issues the
collectives from another, so the main thread alone would show an idle event loop.

Which frame: the innermost one (what it is blocked in: `all_reduce`, `Event.wait`) and the
innermost *meaningful* one: the first, going outwards, that is neither the Python standard
library nor torch itself, i.e. the engine's own call site (`layer_collective
(engine.py:59)`). A frame inside torch/distributed means the rank is inside a collective.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import duckdb

from playbooks.hang.load import StoredCapture
from playbooks.sql import fetch

STACKS_SQL = """
SELECT rank, pid, thread_id, os_thread_id, thread_name, active, depth, function, filename, line
FROM hang_stacks WHERE capture_id = $capture_id
ORDER BY rank, thread_id, depth
"""

_STDLIB = re.compile(r"(^|/)lib/python3\.\d+/(?!site-packages/|dist-packages/)|^<frozen |^<string>")
_TORCH = re.compile(r"(site|dist)-packages/torch/|(^|/)torch/(distributed|nn|_tensor|autograd)/")
_COLLECTIVE = re.compile(r"torch/distributed/")


def is_library(filename: str) -> bool:
    return bool(_STDLIB.search(filename) or _TORCH.search(filename))


@dataclass
class Wait:
    rank: int
    pid: int | None
    thread_id: str | None
    thread_name: str | None
    chosen_by: str              # flight_recorder_thread | collective_frame | same_name_as_other_ranks | main_thread | only_thread
    innermost: str              # "all_reduce (.../distributed_c10d.py:3252)"
    meaningful: str | None      # "layer_collective (/srv/engine.py:59)"
    in_collective: bool
    active: bool | None

    def describe(self) -> str:
        where = self.meaningful or self.innermost
        if self.meaningful and self.meaningful != self.innermost:
            return f"waits in {self.innermost}, called from {where}"
        return f"waits in {where}"


def _short(filename: str) -> str:
    for marker in ("site-packages/", "dist-packages/"):
        if marker in filename:
            return filename.split(marker, 1)[1]
    return filename


def _frame(fn: str, filename: str, line: int | None) -> str:
    return f"{fn} ({_short(filename)}:{line})"


def rank_waits(con: duckdb.DuckDBPyConnection, cap: StoredCapture) -> tuple[str, dict[int, Wait]]:
    sql, rows = fetch(con, STACKS_SQL, capture_id=cap.capture_id)
    threads: dict[int, dict[str, list[tuple]]] = {}
    for row in rows:
        threads.setdefault(int(row[0]), {}).setdefault(str(row[2]), []).append(row)
    fr_thread = cap.fr_threads
    chosen = {rank: _choose(by_thread, fr_thread.get(rank)) for rank, by_thread in threads.items()}
    # A rank that issued no collective we know of: the thread named like the one that issues
    # them on the other ranks (an engine names its step loop the same on every rank).
    names = {threads[r][tid][0][4] for r, (tid, how) in chosen.items()
             if how in ("flight_recorder_thread", "collective_frame")}
    for rank, (_, how) in chosen.items():
        if how in ("main_thread", "only_thread"):
            same = [t for t, f in threads[rank].items() if f[0][4] in names]
            if same:
                chosen[rank] = (same[0], "same_name_as_other_ranks")
    out = {}
    for rank, by_thread in threads.items():
        tid, how = chosen[rank]
        frames = sorted(by_thread[tid], key=lambda f: f[6])
        top = frames[0]
        meaningful = next((f for f in frames if not is_library(str(f[8]))), None)
        out[rank] = Wait(
            rank=rank, pid=top[1], thread_id=tid, thread_name=top[4], chosen_by=how,
            innermost=_frame(top[7], str(top[8]), top[9]),
            meaningful=_frame(meaningful[7], str(meaningful[8]), meaningful[9]) if meaningful else None,
            in_collective=any(_COLLECTIVE.search(str(f[8])) for f in frames[:4]),
            active=top[5])
    return sql, out


def _choose(by_thread: dict[str, list[tuple]], fr_tid: str | None) -> tuple[str, str]:
    if fr_tid and fr_tid in by_thread:
        return fr_tid, "flight_recorder_thread"
    for tid, frames in by_thread.items():
        if any(_COLLECTIVE.search(str(f[8])) for f in frames):
            return tid, "collective_frame"
    for tid, frames in by_thread.items():
        if frames[0][4] == "MainThread" or (frames[0][3] is not None and frames[0][3] == frames[0][1]):
            return tid, "main_thread"
    return next(iter(by_thread)), "only_thread"
