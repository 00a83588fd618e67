"""A busy neighbour for benchmarks that measure beside one: a process spinning a core (ours,
killed after), as on a shared CI runner."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def busy_neighbour(on: bool) -> Iterator[None]:
    """While the block runs, one busy-loop process beside it when `on`; nothing otherwise."""
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if on else None
    try:
        yield
    finally:
        if proc is not None:
            proc.kill()
            proc.wait()
