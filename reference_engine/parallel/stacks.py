"""Each rank's Python stacks on SIGUSR2, written by faulthandler: the fallback when py-spy is
refused ptrace. `kill -USR2 <pid>` makes rank R append every thread's stack to
`DIR/stacks_rank_<R>`; faulthandler writes from the signal handler in C, so a rank whose
main thread is blocked inside a collective (GIL released) still answers.
"""

from __future__ import annotations

import faulthandler
import signal
from pathlib import Path
from typing import IO

# Owns: the open stack files (faulthandler keeps only their descriptors; they must stay open).
_OPEN: dict[int, IO[str]] = {}


def stacks_path(dump_dir: str, rank: int) -> Path:
    return Path(dump_dir) / f"stacks_rank_{rank}"


def register(dump_dir: str | None, rank: int) -> str | None:
    """Install the SIGUSR2 handler for this process; returns the stack file's path."""
    if dump_dir is None or not hasattr(signal, "SIGUSR2"):
        return None
    path = stacks_path(dump_dir, rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    if rank in _OPEN:
        _OPEN.pop(rank).close()
    f = path.open("a", encoding="utf-8")
    _OPEN[rank] = f
    faulthandler.register(signal.SIGUSR2, file=f, all_threads=True, chain=False)
    return str(path)


def unregister(rank: int) -> None:
    if rank in _OPEN and hasattr(signal, "SIGUSR2"):
        faulthandler.unregister(signal.SIGUSR2)
        _OPEN.pop(rank).close()
